package compact

import (
	"context"
	"errors"
	"time"

	"github.com/mnemehq/mneme/message"
)

// Markers that open the Observer's and the Reflector's system prompts, so
// that a model server (or a test double) can tell a summarization request.
const (
	MarkerObserver  = "mneme:observer"
	MarkerReflector = "mneme:reflector"
)

// ExtractiveModel is the Model an Extractive output reports.
const ExtractiveModel = "extractive"

// Errors a Summarizer's output is rejected with (wrapped, as the fallback's
// cause).
var (
	ErrEmpty    = errors.New("empty output")
	ErrTooLarge = errors.New("output larger than its input")
	ErrInvalid  = errors.New("invalid output")
	ErrOverflow = errors.New("input exceeds the summarizer's window")
)

// Entry is one logged message handed to the Observer.
type Entry struct {
	Seq int64
	At  time.Time
	Ref string
	Msg *message.Message
}

// Segment is a contiguous range of the log to observe.
type Segment struct {
	From, To int64
	Entries  []Entry
	// Prior are the observations already in memory: context for the
	// summarizer, not to be repeated.
	Prior string
	// MaxTokens bounds the observations (0: no bound beyond the
	// summarizer's own).
	MaxTokens int
}

// Reflection is a set of observations to condense to Target tokens.
type Reflection struct {
	Text     string
	From, To int64
	Target   int
	// Level is the detail level: 0 keeps the most, each level above drops
	// more (low-priority lines first, then older medium ones).
	Level int
}

// Output is what a summarizer wrote and what it cost.
type Output struct {
	Text         string
	Model        string
	InputTokens  int
	OutputTokens int
	CostUSD      float64
}

// Summarizer writes observations and condenses them. Implementations are
// safe for concurrent use. Errors are not fatal to anyone: the Observer and
// the Reflector fall back to Extractive.
type Summarizer interface {
	Observe(ctx context.Context, seg Segment) (Output, error)
	Reflect(ctx context.Context, r Reflection) (Output, error)
}
