package window

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Strategy says how messages leave the window at a compaction.
type Strategy string

// The strategies (docs/design.md, "How a window is built", step 4).
const (
	// Mask replaces old tool results by one-line placeholders, then archives
	// whole old turns into a catalogue if still over target.
	Mask Strategy = "mask"
	// Archive moves the middle of the thread out as a catalogue: one line per
	// archived turn, with its ref and a preview.
	Archive Strategy = "archive"
	// Observe turns the middle into observations written by a summarizer
	// (an LLM, or the deterministic extractive one).
	Observe Strategy = "observe"
)

// Threshold is a point on the budget: a fraction of the usable budget, an
// absolute token count, or a number of messages in the window. Its JSON form
// is a number in (0,1] (fraction), an integer > 1 (tokens), or a string such
// as "0.75", "60000", "60000 tokens", "75%", "200 messages".
type Threshold struct {
	Fraction float64 // in (0,1]
	Tokens   int
	Messages int
}

// Frac returns a fractional threshold.
func Frac(f float64) Threshold { return Threshold{Fraction: f} }

// Tokens returns an absolute threshold.
func Tokens(n int) Threshold { return Threshold{Tokens: n} }

// IsZero reports whether no threshold is set.
func (t Threshold) IsZero() bool { return t.Fraction == 0 && t.Tokens == 0 && t.Messages == 0 }

// TokensOf resolves the threshold against a usable budget. A messages
// threshold has no token value: it returns the budget itself.
func (t Threshold) TokensOf(budget int) int {
	switch {
	case t.Tokens > 0:
		return t.Tokens
	case t.Fraction > 0:
		return int(math.Floor(t.Fraction * float64(budget)))
	}
	return budget
}

// String renders the threshold in its JSON string form.
func (t Threshold) String() string {
	switch {
	case t.Tokens > 0:
		return strconv.Itoa(t.Tokens) + " tokens"
	case t.Messages > 0:
		return strconv.Itoa(t.Messages) + " messages"
	}
	return strconv.FormatFloat(t.Fraction, 'f', -1, 64)
}

// MarshalJSON writes a fraction or token count as a number, messages as a string.
func (t Threshold) MarshalJSON() ([]byte, error) {
	switch {
	case t.Tokens > 0:
		return []byte(strconv.Itoa(t.Tokens)), nil
	case t.Messages > 0:
		return json.Marshal(t.String())
	}
	return []byte(strconv.FormatFloat(t.Fraction, 'f', -1, 64)), nil
}

// UnmarshalJSON reads any of the documented forms.
func (t *Threshold) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err == nil {
		return t.setNumber(f)
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("threshold: want a number or a string, got %s", b)
	}
	p, err := ParseThreshold(s)
	if err != nil {
		return err
	}
	*t = p
	return nil
}

func (t *Threshold) setNumber(f float64) error {
	switch {
	case f > 0 && f <= 1:
		*t = Threshold{Fraction: f}
	case f > 1 && f == math.Trunc(f) && f < 1e9:
		*t = Threshold{Tokens: int(f)}
	default:
		return fmt.Errorf("threshold %v: want a fraction in (0,1] or a whole token count", f)
	}
	return nil
}

// ParseThreshold reads "0.75", "75%", "60000", "60000 tokens", "200 messages".
func ParseThreshold(s string) (Threshold, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	unit := ""
	for _, u := range []string{"messages", "message", "msgs", "tokens", "token", "%"} {
		if strings.HasSuffix(s, u) {
			unit, s = u, strings.TrimSpace(strings.TrimSuffix(s, u))
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Threshold{}, fmt.Errorf("threshold %q: not a number", s)
	}
	var t Threshold
	switch unit {
	case "%":
		if f <= 0 || f > 100 {
			return t, fmt.Errorf("threshold %v%%: want (0,100]", f)
		}
		return Threshold{Fraction: f / 100}, nil
	case "messages", "message", "msgs":
		if f < 1 || f != math.Trunc(f) {
			return t, fmt.Errorf("threshold %v messages: want a whole number >= 1", f)
		}
		return Threshold{Messages: int(f)}, nil
	case "tokens", "token":
		if f < 1 || f != math.Trunc(f) {
			return t, fmt.Errorf("threshold %v tokens: want a whole number >= 1", f)
		}
		return Threshold{Tokens: int(f)}, nil
	}
	err = t.setNumber(f)
	return t, err
}

// Policy is how a thread's window is built. The zero value is not useful:
// start from DefaultPolicy() and override fields. JSON names are the ones
// fixtures, config files and the API use.
type Policy struct {
	// Model names the model the window is for; it selects the context
	// window and the tokenizer from the model table.
	Model string `json:"model,omitempty"`
	// BudgetTokens overrides the model's context window when > 0.
	BudgetTokens int `json:"budget_tokens,omitempty"`
	// ReserveOutputTokens is kept free for the reply: usable budget =
	// context window - reserve. 0 (the default) takes the model's: the
	// smallest of its maximum output, a quarter of the window (or of
	// BudgetTokens) and 8,192. A reserve over half a small window is
	// shrunk to that default rather than leave no room for the input.
	ReserveOutputTokens int `json:"reserve_output_tokens"`
	// Trigger: compaction starts when the window passes it (default 0.90;
	// the current request's recalled block is not counted against it).
	Trigger Threshold `json:"trigger"`
	// Target: compaction brings the window down to it (default 0.45,
	// less the recalled block's share up to half of it).
	Target Threshold `json:"target"`
	// PinHead keeps the system messages and the first user message (the
	// goal, the ids) in every window.
	PinHead bool `json:"pin_head"`
	// MinTailTurns and MinTailTokens: the live tail always keeps the last
	// turns, and at least that many tokens when they fit.
	MinTailTurns  int `json:"min_tail_turns"`
	MinTailTokens int `json:"min_tail_tokens"`
	// EvictOverTokens: a tool result larger than this (and never more than
	// a quarter of the usable budget) is evicted to a preview.
	EvictOverTokens int `json:"evict_over_tokens"`
	// PreviewLines: head and tail lines an evicted result keeps.
	PreviewLines int `json:"preview_lines"`
	// MaskKeepPerTool: at a compaction, the last K results of each tool
	// stay whole; older ones become placeholders.
	MaskKeepPerTool int `json:"mask_keep_per_tool"`
	// Strategy: mask, archive or observe.
	Strategy Strategy `json:"strategy"`
	// MemoryNamespaces names long-term memory namespaces ("users/alice,
	// projects/shop": comma-separated, elements separated by "/") whose
	// items matching the thread's goal are put in the memory block. They
	// are chosen at compaction points only, so the prefix stays stable.
	MemoryNamespaces string `json:"memory_namespaces,omitempty"`
	// ReflectOver: observations above this are condensed by the Reflector
	// (default 0.15 of the budget, never more than a quarter of it).
	ReflectOver Threshold `json:"reflect_over,omitzero"`
	// AutoRecall: when anything is out of the window, the archive is
	// searched with the current request (and the reply before it) and the
	// best hits not in the window, each with the messages around it, are
	// shown in a recalled block right before the request, chosen when it
	// arrives and at compaction steps (default on). The current request's
	// block has a share of its own above the trigger; an earlier request's
	// large block is dropped when a new request arrives after a short
	// exchange (see window.State.StaleRecalls).
	AutoRecall bool `json:"auto_recall"`
	// RecallTopK: at most that many hits are recalled (default 50; the
	// share bounds the block first).
	RecallTopK int `json:"recall_top_k"`
	// RecallShare and RecallMaxTokens bound the recalled block: at most
	// that fraction of the usable budget and that many tokens (defaults
	// 0.4 and 5,000), and never past the budget.
	RecallShare     float64 `json:"recall_share"`
	RecallMaxTokens int     `json:"recall_max_tokens"`
	// RecallMinScore: a hit whose search score is below it is not recalled
	// (default 0: any hit the search returns).
	RecallMinScore float64 `json:"recall_min_score"`
}

// DefaultPolicy returns the defaults that suit most agents.
func DefaultPolicy() Policy {
	return Policy{
		Model:           "gpt-4o",
		Trigger:         Frac(0.90),
		Target:          Frac(0.45),
		PinHead:         true,
		MinTailTurns:    2,
		MinTailTokens:   6000,
		EvictOverTokens: 20000,
		PreviewLines:    20,
		MaskKeepPerTool: 3,
		Strategy:        Mask,
		ReflectOver:     Frac(0.15),
		AutoRecall:      true,
		RecallTopK:      50,
		RecallShare:     0.4,
		RecallMaxTokens: 5000,
	}
}

// FieldError says which policy field is wrong and why.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "policy." + e.Field + ": " + e.Msg }

// Merge returns p with every field that is set in o (non-zero) replacing
// p's. It is how server, tenant, thread and request policies stack. PinHead
// can only be switched off through the JSON form (see MergeJSON).
func (p Policy) MergeJSON(raw []byte) (Policy, error) {
	if len(raw) == 0 {
		return p, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	q := p
	if err := dec.Decode(&q); err != nil {
		return p, fmt.Errorf("policy: %w", err)
	}
	return q, q.Validate()
}

// Validate checks every field against the budget the model gives; the error
// names the field.
func (p Policy) Validate() error {
	if p.BudgetTokens < 0 {
		return &FieldError{"budget_tokens", "must be >= 0"}
	}
	if p.ReserveOutputTokens < 0 {
		return &FieldError{"reserve_output_tokens", "must be >= 0"}
	}
	if err := checkThreshold("trigger", p.Trigger); err != nil {
		return err
	}
	if err := checkThreshold("target", p.Target); err != nil {
		return err
	}
	if p.Trigger.Fraction > 0 && p.Target.Fraction > 0 && p.Target.Fraction >= p.Trigger.Fraction {
		return &FieldError{"target", fmt.Sprintf("%v must be below trigger %v", p.Target.Fraction, p.Trigger.Fraction)}
	}
	if p.Trigger.Tokens > 0 && p.Target.Tokens > 0 && p.Target.Tokens >= p.Trigger.Tokens {
		return &FieldError{"target", fmt.Sprintf("%d tokens must be below trigger %d", p.Target.Tokens, p.Trigger.Tokens)}
	}
	if p.MinTailTurns < 1 {
		return &FieldError{"min_tail_turns", "must be >= 1"}
	}
	if p.MinTailTokens < 0 {
		return &FieldError{"min_tail_tokens", "must be >= 0"}
	}
	if p.EvictOverTokens < 100 {
		return &FieldError{"evict_over_tokens", "must be >= 100"}
	}
	if p.PreviewLines < 0 || p.PreviewLines > 1000 {
		return &FieldError{"preview_lines", "must be in [0,1000]"}
	}
	if p.MaskKeepPerTool < 0 {
		return &FieldError{"mask_keep_per_tool", "must be >= 0"}
	}
	switch p.Strategy {
	case Mask, Archive, Observe:
	default:
		return &FieldError{"strategy", fmt.Sprintf("%q: want mask, archive or observe", p.Strategy)}
	}
	if p.RecallTopK < 0 || p.RecallTopK > 100 {
		return &FieldError{"recall_top_k", "must be in [0,100]"}
	}
	if p.RecallShare < 0 || p.RecallShare > 0.5 {
		return &FieldError{"recall_share", "must be in [0,0.5]"}
	}
	if p.RecallMaxTokens < 0 {
		return &FieldError{"recall_max_tokens", "must be >= 0"}
	}
	if p.RecallMinScore < 0 {
		return &FieldError{"recall_min_score", "must be >= 0"}
	}
	if !p.ReflectOver.IsZero() {
		if err := checkThreshold("reflect_over", p.ReflectOver); err != nil {
			return err
		}
	}
	return nil
}

func checkThreshold(field string, t Threshold) error {
	n := 0
	if t.Fraction != 0 {
		n++
		if t.Fraction < 0 || t.Fraction > 1 {
			return &FieldError{field, "fraction must be in (0,1]"}
		}
	}
	if t.Tokens != 0 {
		n++
		if t.Tokens < 0 {
			return &FieldError{field, "tokens must be > 0"}
		}
	}
	if t.Messages != 0 {
		n++
		if t.Messages < 0 {
			return &FieldError{field, "messages must be > 0"}
		}
	}
	if n != 1 {
		return &FieldError{field, "set exactly one of a fraction, a token count or a message count"}
	}
	return nil
}
