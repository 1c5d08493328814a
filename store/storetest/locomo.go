package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// LoCoMo (Maharana et al., ACL 2024): long multi-session conversations whose
// questions name their evidence turns. The search quality figures of every
// backend are measured on it, with each question as the query and the
// search scoped to its conversation's thread.

// LoCoMoDir is where the conversations are, relative to a package folder
// one level below the module root's store/ (store/sqlite, store/memory...).
const LoCoMoDir = "../../../shared/data/locomo"

// Conversation is one LoCoMo conversation: its turns in order and its
// questions of categories 1–4 (5, adversarial, has no evidence).
type Conversation struct {
	Name      string
	Turns     []Turn
	Questions []Question
}

// Turn is one turn as a message shows it: "Speaker: text", an image's
// caption appended, at its session's date.
type Turn struct {
	ID   string // D1:3
	Role message.Role
	Text string
	At   time.Time
}

// Question is one question and the turns that answer it.
type Question struct {
	Text     string
	Evidence []string
	Category int
}

// LoadLoCoMo reads every conversation file of dir, in name order.
func LoadLoCoMo(dir string) ([]Conversation, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Conversation
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		var speakerA string
		_ = json.Unmarshal(doc["speaker_a"], &speakerA)
		c := Conversation{Name: strings.TrimSuffix(filepath.Base(f), ".json")}
		for n := 1; ; n++ {
			sess, ok := doc["session_"+strconv.Itoa(n)]
			if !ok {
				break
			}
			var date string
			_ = json.Unmarshal(doc["session_"+strconv.Itoa(n)+"_date_time"], &date)
			at, err := time.Parse("3:04 pm on 2 January, 2006", date)
			if err != nil {
				return nil, fmt.Errorf("%s: session %d date %q: %w", f, n, date, err)
			}
			var turns []struct {
				Speaker, Text, DiaID, BlipCaption string
			}
			var rawTurns []map[string]any
			if err := json.Unmarshal(sess, &rawTurns); err != nil {
				return nil, fmt.Errorf("%s: session %d: %w", f, n, err)
			}
			for _, rt := range rawTurns {
				s := func(k string) string { v, _ := rt[k].(string); return v }
				turns = append(turns, struct{ Speaker, Text, DiaID, BlipCaption string }{s("speaker"), s("text"), s("dia_id"), s("blip_caption")})
			}
			for i, t := range turns {
				text := t.Speaker + ": " + t.Text
				if t.BlipCaption != "" {
					text += " [image: " + t.BlipCaption + "]"
				}
				role := message.Assistant
				if t.Speaker == speakerA {
					role = message.User
				}
				c.Turns = append(c.Turns, Turn{ID: t.DiaID, Role: role, Text: text, At: at.Add(time.Duration(i) * time.Second)})
			}
		}
		var qa []struct {
			Question string   `json:"question"`
			Evidence []string `json:"evidence"`
			Category int      `json:"category"`
		}
		if err := json.Unmarshal(doc["qa"], &qa); err != nil {
			return nil, fmt.Errorf("%s: qa: %w", f, err)
		}
		for _, q := range qa {
			if q.Category < 1 || q.Category > 4 {
				continue
			}
			var ev []string
			for _, e := range q.Evidence {
				ev = append(ev, strings.FieldsFunc(e, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })...)
			}
			c.Questions = append(c.Questions, Question{Text: q.Question, Evidence: ev, Category: q.Category})
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no conversation in %s", dir)
	}
	return out, nil
}

// LoadConversations appends each conversation to s as thread "locomo-NAME"
// of tenant, one message per turn, and returns, per conversation, the seq
// of each turn id.
func LoadConversations(ctx context.Context, s store.Store, tenant string, convs []Conversation) ([]map[string]int64, error) {
	var seqs []map[string]int64
	for _, c := range convs {
		evs := make([]store.Event, len(c.Turns))
		m := map[string]int64{}
		for i, t := range c.Turns {
			msg := message.NewText(t.Role, t.Text)
			msg.Time = t.At
			evs[i] = store.Event{Kind: store.KindMessage, At: t.At, Message: &msg}
			m[t.ID] = int64(i + 1)
		}
		for off := 0; off < len(evs); off += 200 {
			end := min(off+200, len(evs))
			if _, err := s.Append(ctx, tenant, "locomo-"+c.Name, int64(off), evs[off:end]); err != nil {
				return nil, err
			}
		}
		seqs = append(seqs, m)
	}
	return seqs, nil
}

// SearchFigures are the search quality figures over a set of questions:
// the mean share of each question's evidence turns in its top 10 hits, the
// share of questions with one in the top 10, and the mean reciprocal rank
// of the first one within the top 10.
type SearchFigures struct {
	Questions                int
	RecallAt10, HitAt10, MRR float64
}

func (f SearchFigures) String() string {
	return fmt.Sprintf("questions %d recall@10 %.3f hit@10 %.3f mrr@10 %.3f", f.Questions, f.RecallAt10, f.HitAt10, f.MRR)
}

// SearchFunc is an archive search: a backend's or recall's.
type SearchFunc func(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error)

// MeasureLoCoMo asks every question of convs (loaded by LoadConversations
// into tenant, with seqs its result) through search, scoped to the
// conversation's thread, and returns the figures.
func MeasureLoCoMo(ctx context.Context, search SearchFunc, tenant string, convs []Conversation, seqs []map[string]int64) (SearchFigures, error) {
	var f SearchFigures
	for ci, c := range convs {
		for _, q := range c.Questions {
			want := map[int64]bool{}
			for _, e := range q.Evidence {
				if seq, ok := seqs[ci][e]; ok {
					want[seq] = true
				}
			}
			if len(want) == 0 {
				continue
			}
			hits, err := search(ctx, tenant, store.SearchQuery{Text: q.Text, Thread: "locomo-" + c.Name, Limit: 10})
			if err != nil {
				return f, fmt.Errorf("%q: %w", q.Text, err)
			}
			found, first := 0, 0
			for i, h := range hits {
				if want[h.Seq] {
					found++
					if first == 0 {
						first = i + 1
					}
				}
			}
			f.Questions++
			f.RecallAt10 += float64(found) / float64(len(want))
			if first > 0 {
				f.HitAt10++
				f.MRR += 1 / float64(first)
			}
		}
	}
	if f.Questions > 0 {
		n := float64(f.Questions)
		f.RecallAt10, f.HitAt10, f.MRR = f.RecallAt10/n, f.HitAt10/n, f.MRR/n
	}
	return f, nil
}

// LoCoMoSearch loads the LoCoMo conversations into s and checks that
// per-thread search finds their evidence turns: the floors are what the
// search rules reach on every backend (they once were 0.52 / 0.58 / 0.38).
func LoCoMoSearch(t *testing.T, s store.Store) {
	t.Helper()
	convs, err := LoadLoCoMo(LoCoMoDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seqs, err := LoadConversations(ctx, s, "locomo", convs)
	if err != nil {
		t.Fatal(err)
	}
	f, err := MeasureLoCoMo(ctx, s.Search, "locomo", convs, seqs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("LoCoMo per-thread search: %v", f)
}
