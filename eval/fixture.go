package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/window"
)

// ErrFixture marks a fixture that cannot be run as written: bad JSON, no
// turns, no checks, an unknown check kind, a check past the last turn.
// Such a fixture is an error, never a pass.
var ErrFixture = errors.New("invalid fixture")

// Fixture is one long-session regression test: a policy, a scripted
// session and the checks that must hold along it.
type Fixture struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Policy is merged over window.DefaultPolicy(): any Policy field, by
	// its JSON name.
	Policy json.RawMessage `json:"policy,omitempty"`
	Turns  []Turn          `json:"turns"`
	Checks []Check         `json:"checks"`

	// Path is the file the fixture was read from; Source says which format
	// it came in ("mneme" or "context-manager").
	Path   string `json:"-"`
	Source string `json:"-"`
}

// Turn is what happens before one model call: messages the agent appends
// (OpenAI chat messages), or the model's own answer to the window built at
// the previous turn. Each turn ends with a window: the one the next model
// call would be sent.
type Turn struct {
	// At dates the turn's messages (RFC 3339); default: a fixed clock that
	// advances one minute a turn, so runs are reproducible.
	At *time.Time `json:"at,omitempty"`
	// Messages are OpenAI chat messages, tool calls and results included.
	Messages []json.RawMessage `json:"messages,omitempty"`
	// Model scripts the model's answer: an OpenAI assistant message
	// ({"content":..., "tool_calls":[...]}; "role" may be left out).
	Model json.RawMessage `json:"model,omitempty"`
}

// Check kinds. Each check has exactly one.
const (
	KindWindowContains      = "window_contains"
	KindWindowExcludes      = "window_excludes"
	KindRecallable          = "recallable"
	KindReadable            = "readable"
	KindWindowTokensAtMost  = "window_tokens_at_most"
	KindWindowCharsAtMost   = "window_chars_at_most"
	KindToolPairsIntact     = "tool_pairs_intact"
	KindCompactionsAtLeast  = "compactions_at_least"
	KindArchivedAtLeast     = "archived_at_least"
	KindObservationContains = "observation_contains"
	KindPrefixStable        = "prefix_stable"
)

// Kinds lists every check kind, sorted.
var Kinds = []string{
	KindArchivedAtLeast, KindCompactionsAtLeast, KindObservationContains, KindPrefixStable,
	KindReadable, KindRecallable, KindToolPairsIntact, KindWindowCharsAtMost,
	KindWindowContains, KindWindowExcludes, KindWindowTokensAtMost,
}

// Check is one assertion about the window after turn AfterTurn (1-based).
// In JSON it is {"after_turn": N, "<kind>": argument, "description": ...}.
type Check struct {
	AfterTurn   int
	Description string
	Kind        string
	Arg         json.RawMessage
}

// Recall is the argument of a recallable check: the archive search for
// Query finds, in its first TopK hits, a message containing Expect.
type Recall struct {
	Query  string `json:"query"`
	TopK   int    `json:"top_k,omitempty"` // default 3
	Expect string `json:"expect"`
}

// UnmarshalJSON reads the one-kind form and rejects unknown keys, so that a
// misspelt kind is an error instead of a check that never runs.
func (c *Check) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = Check{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch {
		case k == "after_turn":
			if err := json.Unmarshal(v, &c.AfterTurn); err != nil {
				return fmt.Errorf("after_turn: %w", err)
			}
		case k == "description":
			if err := json.Unmarshal(v, &c.Description); err != nil {
				return fmt.Errorf("description: %w", err)
			}
		case slices.Contains(Kinds, k):
			if c.Kind != "" {
				return fmt.Errorf("two kinds in one check: %q and %q", c.Kind, k)
			}
			c.Kind, c.Arg = k, v
		default:
			return fmt.Errorf("unknown check kind %q (known: %s)", k, strings.Join(Kinds, ", "))
		}
	}
	if _, ok := m["after_turn"]; !ok {
		return errors.New("after_turn is required")
	}
	if c.Kind == "" {
		return fmt.Errorf("no check kind (known: %s)", strings.Join(Kinds, ", "))
	}
	return nil
}

// MarshalJSON writes the one-kind form back.
func (c Check) MarshalJSON() ([]byte, error) {
	m := map[string]any{"after_turn": c.AfterTurn, c.Kind: c.Arg}
	if c.Description != "" {
		m["description"] = c.Description
	}
	return json.Marshal(m)
}

// Label is how reports name the check: its index, turn and kind.
func (c Check) Label(i int) string {
	return fmt.Sprintf("check %d (%s after turn %d)", i+1, c.Kind, c.AfterTurn)
}

// Parse reads a fixture in either format: the native one, or the Python
// context-manager library's (recognised by its "assertions" or "config").
// The fixture is validated (Validate) before it is returned.
func Parse(data []byte, path string) (*Fixture, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFixture, err)
	}
	var f *Fixture
	if isContextManager(probe) {
		cf, err := ImportContextManager(data)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFixture, err)
		}
		f = cf
	} else {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		f = &Fixture{}
		if err := dec.Decode(f); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFixture, err)
		}
		f.Source = "mneme"
	}
	f.Path = path
	if f.Name == "" {
		f.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// Validate reports why the fixture cannot be run, naming the fixture and the
// check or turn at fault. Running an invalid fixture would prove nothing.
func (f *Fixture) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrFixture, f.Name, fmt.Sprintf(format, args...))
	}
	if len(f.Turns) == 0 {
		return bad("no turns")
	}
	if len(f.Checks) == 0 {
		return bad("no checks: a fixture that checks nothing cannot pass")
	}
	if _, err := f.policy(); err != nil {
		return bad("%v", err)
	}
	for i, t := range f.Turns {
		if (len(t.Messages) > 0) == (len(t.Model) > 0) {
			return bad("turn %d: set exactly one of messages and model", i+1)
		}
		if len(t.Model) > 0 && i == 0 {
			return bad("turn 1: a model turn answers a window, so it cannot come first")
		}
		if _, err := t.decode(); err != nil {
			return bad("turn %d: %v", i+1, err)
		}
	}
	for i, c := range f.Checks {
		if c.AfterTurn < 1 || c.AfterTurn > len(f.Turns) {
			return bad("%s: after_turn %d is outside the fixture's turns 1–%d", c.Label(i), c.AfterTurn, len(f.Turns))
		}
		if c.Kind == KindPrefixStable && c.AfterTurn == 1 {
			return bad("%s: turn 1 has no previous window to compare with", c.Label(i))
		}
		if err := c.validateArg(); err != nil {
			return bad("%s: %v", c.Label(i), err)
		}
	}
	return nil
}

func (f *Fixture) policy() (window.Policy, error) {
	return window.DefaultPolicy().MergeJSON(f.Policy)
}

// decode turns the turn's wire messages into messages.
func (t Turn) decode() ([]message.Message, error) {
	if len(t.Model) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(t.Model, &m); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		if r, ok := m["role"]; ok && string(r) != `"assistant"` {
			return nil, fmt.Errorf("model: the model answers as assistant, not %s", r)
		}
		m["role"] = json.RawMessage(`"assistant"`)
		b, _ := json.Marshal(m)
		msg, err := message.DecodeOpenAI(b)
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		return []message.Message{msg}, nil
	}
	out := make([]message.Message, 0, len(t.Messages))
	for j, raw := range t.Messages {
		msg, err := message.DecodeOpenAI(raw)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", j+1, err)
		}
		out = append(out, msg)
	}
	return out, nil
}

func (c Check) validateArg() error {
	var err error
	switch c.Kind {
	case KindWindowContains, KindWindowExcludes, KindReadable, KindObservationContains:
		var s string
		if err = json.Unmarshal(c.Arg, &s); err == nil && s == "" {
			err = errors.New("empty text")
		}
	case KindWindowTokensAtMost, KindWindowCharsAtMost, KindCompactionsAtLeast, KindArchivedAtLeast:
		var n int
		if err = json.Unmarshal(c.Arg, &n); err == nil && n < 0 {
			err = errors.New("must be >= 0")
		}
	case KindToolPairsIntact, KindPrefixStable:
		var b bool
		err = json.Unmarshal(c.Arg, &b)
	case KindRecallable:
		var r Recall
		dec := json.NewDecoder(bytes.NewReader(c.Arg))
		dec.DisallowUnknownFields()
		if err = dec.Decode(&r); err == nil && (r.Query == "" || r.Expect == "" || r.TopK < 0) {
			err = errors.New(`needs "query" and "expect" (and "top_k" >= 0)`)
		}
	default:
		err = fmt.Errorf("unknown kind %q", c.Kind)
	}
	if err != nil {
		return fmt.Errorf("argument: %w", err)
	}
	return nil
}

// LoadError is a fixture file that could not be read or is invalid.
type LoadError struct {
	Path string
	Err  error
}

func (e *LoadError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns the cause (ErrFixture for an invalid fixture).
func (e *LoadError) Unwrap() error { return e.Err }

// Load reads the fixtures at paths: files, or folders whose *.json files
// are read (recursively, in name order). A file that fails to parse is
// returned as an error in errs, alongside the others' fixtures, so one bad
// fixture does not hide the rest.
func Load(paths ...string) (fixtures []*Fixture, errs []error) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files := []string{p}
		if st.IsDir() {
			files = nil
			err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if !d.IsDir() && strings.HasSuffix(d.Name(), ".json") {
					files = append(files, path)
				}
				return nil
			})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sort.Strings(files)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				errs = append(errs, &LoadError{file, err})
				continue
			}
			f, err := Parse(data, file)
			if err != nil {
				errs = append(errs, &LoadError{file, err})
				continue
			}
			fixtures = append(fixtures, f)
		}
	}
	return fixtures, errs
}
