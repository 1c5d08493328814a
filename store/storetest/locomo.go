package storetest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mnemehq/mneme/eval"
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

// LoadConversations appends each conversation to s as thread "locomo-ID"
// of tenant, one message per turn ("Speaker: text", an image's caption
// appended as it is shown, speaker A as the user, at its session's date),
// and returns, per conversation, the seq of each turn id.
func LoadConversations(ctx context.Context, s store.Store, tenant string, convs []*eval.LoCoMoConversation) ([]map[string]int64, error) {
	var seqs []map[string]int64
	for _, c := range convs {
		var evs []store.Event
		m := map[string]int64{}
		for _, sess := range c.Sessions {
			for i, t := range sess.Turns {
				text := t.Speaker + ": " + t.Text
				if t.BlipCaption != "" {
					text += " [image: " + t.BlipCaption + "]"
				}
				role := message.Assistant
				if t.Speaker == c.SpeakerA {
					role = message.User
				}
				msg := message.NewText(role, text)
				msg.Time = sess.Date.Add(time.Duration(i) * time.Second)
				evs = append(evs, store.Event{Kind: store.KindMessage, At: msg.Time, Message: &msg})
				m[t.DiaID] = int64(len(evs))
			}
		}
		for off := 0; off < len(evs); off += 200 {
			end := min(off+200, len(evs))
			if _, err := s.Append(ctx, tenant, "locomo-"+c.ID, int64(off), evs[off:end]); err != nil {
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
func MeasureLoCoMo(ctx context.Context, search SearchFunc, tenant string, convs []*eval.LoCoMoConversation, seqs []map[string]int64) (SearchFigures, error) {
	var f SearchFigures
	for ci, c := range convs {
		for _, q := range c.Questions {
			if q.Category < eval.LoCoMoMultiHop || q.Category > eval.LoCoMoSingleHop {
				continue // adversarial questions have no evidence
			}
			want := map[int64]bool{}
			for _, e := range q.Evidence {
				if seq, ok := seqs[ci][e]; ok {
					want[seq] = true
				}
			}
			if len(want) == 0 {
				continue
			}
			hits, err := search(ctx, tenant, store.SearchQuery{Text: q.Question, Thread: "locomo-" + c.ID, Limit: 10})
			if err != nil {
				return f, fmt.Errorf("%q: %w", q.Question, err)
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
// per-thread search finds their evidence turns, the question as the query:
// hit@10 at least 0.70 and recall@10 at least 0.62 (before stems,
// stopwords and the identifier rules, 0.58 and 0.53).
func LoCoMoSearch(t *testing.T, s store.Store) {
	t.Helper()
	convs, err := eval.LoadLoCoMo(LoCoMoDir)
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
	if f.Questions < 700 || f.HitAt10 < 0.70 || f.RecallAt10 < 0.62 {
		t.Errorf("LoCoMo per-thread search: %v; want hit@10 >= 0.70 and recall@10 >= 0.62 over the 760 questions", f)
	}
}

// LoCoMoSame checks that s answers the questions of one LoCoMo
// conversation exactly as the reference store ref does (store/inmem, which
// LoCoMoSearch measures): the same hits in the same order. Matching and
// ranking are shared code, so a backend that finds other candidates, or
// counts other statistics, shows here.
func LoCoMoSame(t *testing.T, s, ref store.Store) {
	t.Helper()
	all, err := eval.LoadLoCoMo(LoCoMoDir)
	if err != nil {
		t.Fatal(err)
	}
	convs := all[1:2] // 30: the shortest conversation
	ctx := context.Background()
	for _, st := range []store.Store{s, ref} {
		if _, err := LoadConversations(ctx, st, "locomo", convs); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, q := range convs[0].Questions {
		sq := store.SearchQuery{Text: q.Question, Thread: "locomo-" + convs[0].ID, Limit: 10}
		got, err := s.Search(ctx, "locomo", sq)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Search(ctx, "locomo", sq)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seqsInOrder(got), seqsInOrder(want)) {
			t.Errorf("%q: hits %v, the reference's %v", q.Question, seqsInOrder(got), seqsInOrder(want))
		}
		for i := range min(len(got), len(want)) {
			if math.Abs(got[i].Score-want[i].Score) > 1e-9*math.Max(1, want[i].Score) {
				t.Errorf("%q: hit %d score %v, the reference's %v", q.Question, i, got[i].Score, want[i].Score)
				break
			}
		}
		n++
	}
	if n < 50 {
		t.Fatalf("only %d questions", n)
	}
}
