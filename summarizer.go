package mneme

import (
	"context"
	"strings"
	"time"

	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// The engine's default Compactor: an adapter from a compact.Summarizer
// (the extractive one, or a model through compact.NewLLM) to the Compactor
// and Reflector interfaces the thread calls at compaction.

// ReflectInput is what a Reflector gets: the memory block's entries, all
// to be condensed into one of at most Target tokens.
type ReflectInput struct {
	Tenant, Thread string
	Blocks         []window.Block
	Target         int
	Policy         Policy
	Counter        token.Counter
}

// Reflector condenses the memory block when its observations pass the
// policy's ReflectOver. A Compactor that also implements Reflector
// reflects; otherwise the extractive Reflector does. Like a Compactor, it
// must not fail the request: it falls back and says so in Fallback.
type Reflector interface {
	Reflect(ctx context.Context, in ReflectInput) (window.ReflectedData, error)
}

// NewCompactor returns the Compactor (and Reflector) that runs compact's
// Observer and Reflector over s, with compact.Extractive as the fallback of
// every failure. s == nil observes extractively.
func NewCompactor(s compact.Summarizer) Compactor {
	return summarizerCompactor{s: s}
}

// summarizerCompactor adapts compact to the engine's interfaces.
type summarizerCompactor struct{ s compact.Summarizer }

func (c summarizerCompactor) Observe(ctx context.Context, in CompactInput) (window.CompactedData, error) {
	o := compact.Observer{Summarizer: c.s, Counter: in.Counter}
	return o.Observe(ctx, compact.Segment{
		From: in.From, To: in.To,
		Entries:   entriesOf(in.Items),
		Prior:     priorText(in.Blocks),
		MaxTokens: in.MaxTokens,
	}), nil
}

func (c summarizerCompactor) Reflect(ctx context.Context, in ReflectInput) (window.ReflectedData, error) {
	r := compact.Condenser{Summarizer: c.s, Counter: in.Counter}
	return r.Reflect(ctx, in.Blocks, in.Target), nil
}

// slow reports whether the summarizer calls a model: only then is
// buffering in the background worth a goroutine.
func (c summarizerCompactor) slow() bool {
	if c.s == nil {
		return false
	}
	_, extractive := c.s.(compact.Extractive)
	return !extractive
}

// entriesOf turns window items into the Observer's input.
func entriesOf(items []*window.Item) []compact.Entry {
	out := make([]compact.Entry, 0, len(items))
	for _, it := range items {
		out = append(out, compact.Entry{Seq: it.Seq, At: unixUTC(it.At), Ref: it.Ref, Msg: it.Msg})
	}
	return out
}

func unixUTC(sec int64) time.Time { return time.Unix(sec, 0).UTC() }

func priorText(blocks []window.Block) string {
	var b strings.Builder
	for _, bl := range blocks {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(bl.Text)
	}
	return b.String()
}

// newSummarizer builds the summarizer Config asks for: an LLM when a model
// is named, else the extractive one.
func newSummarizer(cfg compact.LLMConfig, models *token.Table) (compact.Summarizer, error) {
	if cfg.Model == "" {
		return compact.Extractive{}, nil
	}
	if cfg.Models == nil {
		cfg.Models = models
	}
	return compact.NewLLM(cfg)
}
