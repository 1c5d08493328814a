package compact

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mnemehq/mneme/llm"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// Observer turns a range of the log into observations with its Summarizer,
// falling back to Extractive on any failure (I5). The zero value observes
// extractively.
type Observer struct {
	// Summarizer writes the observations; nil: Extractive.
	Summarizer Summarizer
	// Counter measures inputs and outputs; nil: the conservative estimator.
	Counter token.Counter
}

func (o *Observer) counter() token.Counter { return Extractive{Counter: o.Counter}.counter() }

func (o *Observer) extractive() Extractive { return Extractive{Counter: o.Counter} }

// Observe returns the compacted event's payload for seg: the observation,
// its range, its size, the model, the duration and the cost. It never
// fails: when the Summarizer does, Extractive writes the observation and
// Fallback says why. TokensBefore is the caller's to fill (what the range
// cost in the window).
func (o *Observer) Observe(ctx context.Context, seg Segment) window.CompactedData {
	start := time.Now()
	d := window.CompactedData{Strategy: window.Observe, From: seg.From, To: seg.To}
	var out Output
	var err error
	if s := o.Summarizer; s != nil {
		if _, isExtractive := s.(Extractive); !isExtractive {
			out, err = s.Observe(ctx, seg)
			if err == nil {
				err = o.check(seg, out.Text)
			}
			if err != nil {
				d.Fallback = "summarizer failed: " + cause(ctx, err) + ": extractive"
			}
		}
	}
	if o.Summarizer == nil || d.Fallback != "" || out.Text == "" {
		out, _ = o.extractive().Observe(ctx, seg)
	}
	d.Text, d.Model, d.CostUSD = out.Text, out.Model, out.CostUSD
	d.TokensAfter = o.counter().Count(d.Text)
	d.DurationMS = time.Since(start).Milliseconds()
	return d
}

// check rejects an observation that is empty, no smaller than its input,
// echoes the prompt, or cites seqs outside its range.
func (o *Observer) check(seg Segment, text string) error {
	if strings.TrimSpace(text) == "" {
		return ErrEmpty
	}
	if strings.Contains(text, MarkerObserver) || strings.Contains(text, MarkerReflector) {
		return fmt.Errorf("%w: it echoes the prompt", ErrInvalid)
	}
	c := o.counter()
	var in strings.Builder
	for _, en := range seg.Entries {
		in.WriteString(RenderEntry(en, 0))
		in.WriteByte('\n')
	}
	if n, m := c.Count(text), c.Count(in.String()); n >= m {
		return fmt.Errorf("%w (%d tokens for %d)", ErrTooLarge, n, m)
	}
	if seg.MaxTokens > 0 {
		if n := c.Count(text); n > seg.MaxTokens {
			return fmt.Errorf("%w: %d tokens, over the %d allowed", ErrTooLarge, n, seg.MaxTokens)
		}
	}
	return checkRanges(text, seg.From, seg.To)
}

// checkRanges rejects a text citing a seq range outside [from, to]: a
// summarizer that invents ranges cannot be trusted with the facts either.
func checkRanges(text string, from, to int64) error {
	for _, m := range rangeRe.FindAllStringSubmatch(text, -1) {
		a, err1 := strconv.ParseInt(m[1], 10, 64)
		b, err2 := strconv.ParseInt(m[2], 10, 64)
		if err1 != nil || err2 != nil || a > b || a < from || b > to {
			return fmt.Errorf("%w: range %s outside [%d–%d]", ErrInvalid, m[0], from, to)
		}
	}
	return nil
}

// cause names why a summarizer call failed, for the event.
func cause(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case ctx.Err() != nil:
		return "cancelled"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Condenser condenses the memory block's observations when they pass their
// threshold, with its Summarizer, retrying at lower detail levels while the
// result is over target, then falling back to Extractive (which always
// fits). The zero value reflects extractively.
type Condenser struct {
	Summarizer Summarizer
	Counter    token.Counter
}

// Levels the Reflector tries with a model before falling back.
const modelLevels = 3

// Reflect condenses blocks into one observation of at most target tokens
// and returns the reflected event's payload (replacing every block). It
// never fails.
func (r *Condenser) Reflect(ctx context.Context, blocks []window.Block, target int) window.ReflectedData {
	start := time.Now()
	c := Extractive{Counter: r.Counter}.counter()
	d := window.ReflectedData{From: blocks[0].From, To: blocks[0].To}
	var in strings.Builder
	for _, b := range blocks {
		d.Replaces = append(d.Replaces, b.EventSeq)
		d.From, d.To = min(d.From, b.From), max(d.To, b.To)
		if in.Len() > 0 {
			in.WriteByte('\n')
		}
		in.WriteString(b.Text)
	}
	text := in.String()
	d.TokensBefore = c.Count(text)
	var out Output
	done := false
	if s := r.Summarizer; s != nil {
		if _, isExtractive := s.(Extractive); !isExtractive {
			var why string
			for level := 0; level < modelLevels; level++ {
				o, err := s.Reflect(ctx, Reflection{Text: text, From: d.From, To: d.To, Target: target, Level: level})
				if err == nil && strings.TrimSpace(o.Text) == "" {
					err = ErrEmpty
				}
				if err == nil {
					err = checkRanges(o.Text, d.From, d.To)
				}
				if errors.Is(err, llm.ErrTruncated) {
					why = fmt.Sprintf("summarizer ran past the %d-token target at level %d", target, level)
					continue
				}
				if err != nil {
					why = "summarizer failed: " + cause(ctx, err)
					break // a failing summarizer is not asked again
				}
				if n := c.Count(o.Text); n > target {
					why = fmt.Sprintf("summarizer still at %d tokens for a %d target at level %d", n, target, level)
					continue
				}
				out, d.Level, done = o, level, true
				break
			}
			if !done {
				d.Fallback = why + ": extractive"
			}
		}
	}
	if !done {
		for level := 0; ; level++ {
			out, _ = Extractive{Counter: r.Counter}.Reflect(ctx, Reflection{Text: text, From: d.From, To: d.To, Target: target, Level: level})
			if c.Count(out.Text) <= target || level >= extractiveLevels-1 {
				d.Level = level
				break
			}
		}
	}
	d.Text, d.Model = out.Text, out.Model
	d.TokensAfter = c.Count(d.Text)
	d.DurationMS = time.Since(start).Milliseconds()
	return d
}
