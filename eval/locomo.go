package eval

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LoCoMo question categories, as numbered in the dataset's release.
const (
	LoCoMoMultiHop    = 1
	LoCoMoTemporal    = 2
	LoCoMoOpenDomain  = 3
	LoCoMoSingleHop   = 4
	LoCoMoAdversarial = 5
)

// LoCoMoCategoryName names a question category as the bench reports it
// ("multi-hop", "temporal", "open-domain", "single-hop", "adversarial").
func LoCoMoCategoryName(c int) string {
	switch c {
	case LoCoMoMultiHop:
		return "multi-hop"
	case LoCoMoTemporal:
		return "temporal"
	case LoCoMoOpenDomain:
		return "open-domain"
	case LoCoMoSingleHop:
		return "single-hop"
	case LoCoMoAdversarial:
		return "adversarial"
	}
	return "category-" + strconv.Itoa(c)
}

// LoCoMoConversation is one conversation of the LoCoMo release (Maharana et
// al., ACL 2024): two speakers over many dated sessions, and questions whose
// evidence turns are labelled.
type LoCoMoConversation struct {
	// ID is the file's base name without extension ("26").
	ID       string
	SpeakerA string
	SpeakerB string
	Sessions []LoCoMoSession
	// Questions keep the file's order; evidence ids that name no turn of
	// the conversation are dropped (see LoCoMoQuestion.DroppedEvidence).
	Questions []LoCoMoQuestion
}

// LoCoMoSession is one dated session, its turns in order.
type LoCoMoSession struct {
	// N is the session's number (session_N).
	N int
	// DateText is the date as written ("1:56 pm on 8 May, 2023"); Date is
	// it parsed (UTC), the zero time when it does not parse.
	DateText string
	Date     time.Time
	Turns    []LoCoMoTurn
}

// LoCoMoTurn is one utterance.
type LoCoMoTurn struct {
	// DiaID is the dataset's turn id ("D3:14": session 3, turn 14).
	DiaID   string `json:"dia_id"`
	Speaker string `json:"speaker"`
	Text    string `json:"text"`
	// BlipCaption describes the image a speaker shared, when one was.
	BlipCaption string `json:"blip_caption,omitempty"`
}

// LoCoMoQuestion is one question with its labelled evidence turns.
type LoCoMoQuestion struct {
	Question string
	// Answer is the reference answer rendered as text (the release mixes
	// strings and numbers); empty for adversarial questions.
	Answer   string
	Category int
	// Evidence are dia ids of turns of this conversation, deduplicated.
	Evidence []string
	// DroppedEvidence are evidence entries that name no turn (typos of the
	// release such as "D" or a turn past a session's end), kept to report.
	DroppedEvidence []string
}

// Turns returns every turn of the conversation in order.
func (c *LoCoMoConversation) Turns() []LoCoMoTurn {
	var out []LoCoMoTurn
	for _, s := range c.Sessions {
		out = append(out, s.Turns...)
	}
	return out
}

var (
	locomoSessionKey = regexp.MustCompile(`^session_(\d+)$`)
	// locomoDiaID finds dia ids inside an evidence entry, tolerating the
	// release's variants: "D8:6; D9:17" (two in one) and "D:11:26".
	locomoDiaID = regexp.MustCompile(`D:?(\d+):(\d+)`)
)

// locomoDateLayouts are the date forms the release uses.
var locomoDateLayouts = []string{"3:04 pm on 2 January, 2006", "3:04 pm on 2 Jan, 2006"}

// ParseLoCoMoDate parses a session date such as "1:56 pm on 8 May, 2023".
func ParseLoCoMoDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, l := range locomoDateLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("locomo: unrecognised session date %q", s)
}

// LoadLoCoMo reads every *.json file of dir as a LoCoMo conversation, sorted
// by file name.
func LoadLoCoMo(dir string) ([]*LoCoMoConversation, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("locomo: no *.json conversation in %s", dir)
	}
	sort.Strings(paths)
	var out []*LoCoMoConversation
	for _, p := range paths {
		c, err := LoadLoCoMoFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// LoadLoCoMoFile reads one conversation file.
func LoadLoCoMoFile(path string) (*LoCoMoConversation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	id := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	c, err := ParseLoCoMo(id, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseLoCoMo decodes one conversation. Both the flat layout of the
// multimodal release (speaker_a, session_N, qa at the top) and the layout of
// locomo10.json (a "conversation" object beside "qa") are accepted.
func ParseLoCoMo(id string, data []byte) (*LoCoMoConversation, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("locomo: %w", err)
	}
	conv := top
	if raw, ok := top["conversation"]; ok {
		if err := json.Unmarshal(raw, &conv); err != nil {
			return nil, fmt.Errorf("locomo: conversation: %w", err)
		}
	}
	c := &LoCoMoConversation{ID: id}
	if err := decodeString(conv, "speaker_a", &c.SpeakerA); err != nil {
		return nil, err
	}
	if err := decodeString(conv, "speaker_b", &c.SpeakerB); err != nil {
		return nil, err
	}
	if c.SpeakerA == "" || c.SpeakerB == "" {
		return nil, fmt.Errorf("locomo: speaker_a and speaker_b are required")
	}
	ids := map[string]bool{}
	for k, raw := range conv {
		m := locomoSessionKey.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		s := LoCoMoSession{N: n}
		if err := json.Unmarshal(raw, &s.Turns); err != nil {
			return nil, fmt.Errorf("locomo: %s: %w", k, err)
		}
		if err := decodeString(conv, k+"_date_time", &s.DateText); err != nil {
			return nil, err
		}
		if s.DateText != "" {
			d, err := ParseLoCoMoDate(s.DateText)
			if err != nil {
				return nil, err
			}
			s.Date = d
		}
		for i, t := range s.Turns {
			if t.DiaID == "" || t.Speaker == "" {
				return nil, fmt.Errorf("locomo: %s turn %d: dia_id and speaker are required", k, i+1)
			}
			ids[t.DiaID] = true
		}
		c.Sessions = append(c.Sessions, s)
	}
	if len(c.Sessions) == 0 {
		return nil, fmt.Errorf("locomo: no session_N in the conversation")
	}
	sort.Slice(c.Sessions, func(i, j int) bool { return c.Sessions[i].N < c.Sessions[j].N })

	var qa []struct {
		Question string          `json:"question"`
		Answer   json.RawMessage `json:"answer"`
		Evidence []string        `json:"evidence"`
		Category int             `json:"category"`
	}
	if raw, ok := top["qa"]; ok {
		if err := json.Unmarshal(raw, &qa); err != nil {
			return nil, fmt.Errorf("locomo: qa: %w", err)
		}
	}
	for _, q := range qa {
		lq := LoCoMoQuestion{Question: q.Question, Category: q.Category, Answer: answerText(q.Answer)}
		seen := map[string]bool{}
		for _, e := range q.Evidence {
			found := locomoDiaID.FindAllStringSubmatch(e, -1)
			kept := false
			for _, m := range found {
				d := "D" + m[1] + ":" + m[2]
				if ids[d] {
					kept = true
					if !seen[d] {
						seen[d] = true
						lq.Evidence = append(lq.Evidence, d)
					}
				}
			}
			if !kept {
				lq.DroppedEvidence = append(lq.DroppedEvidence, e)
			}
		}
		c.Questions = append(c.Questions, lq)
	}
	return c, nil
}

func decodeString(m map[string]json.RawMessage, key string, dst *string) error {
	raw, ok := m[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("locomo: %s: %w", key, err)
	}
	return nil
}

// answerText renders an answer that may be a string, a number or null.
func answerText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
