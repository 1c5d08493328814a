package backend

import (
	"slices"
	"testing"

	"github.com/mnemehq/mneme/message"
)

func callsOf(parts ...message.Part) *message.Message {
	m := message.NewToolCalls("", parts...)
	return &m
}

func seqOf(msgs ...*message.Message) func(func(*message.Message) bool) {
	return slices.Values(msgs)
}

func TestCallCache(t *testing.T) {
	var c CallCache
	look := func(after int64, id string) string {
		t.Helper()
		n, ok := c.Lookup("a", "t", after, id)
		if !ok {
			return "?"
		}
		return n
	}
	text := message.NewText(message.User, "hi")
	// Seqs 1-3: a user message, a call of two parts (x twice: a message's
	// first call of an id names it, as CallName), a nameless call.
	c.Remember(c.Gen(), "a", "t", 0, seqOf(&text,
		callsOf(message.Part{ToolCallID: "x", ToolName: "first"}, message.Part{ToolCallID: "y", ToolName: "why"}, message.Part{ToolCallID: "x", ToolName: "second"}),
		callsOf(message.Part{ToolCallID: "y"})))
	if got := look(3, "x"); got != "first" {
		t.Errorf("x = %q, want first", got)
	}
	if got := look(3, "y"); got != "why" {
		t.Errorf("y = %q, want why (a nameless call is passed over)", got)
	}
	if got := look(2, "x"); got != "?" {
		t.Errorf("at another seq than the last: %q, want unknown", got)
	}
	if got := look(3, "z"); got != "?" {
		t.Errorf("a call not made: %q, want unknown (the log is read)", got)
	}
	if _, ok := c.Lookup("a", "u", 3, "x"); ok {
		t.Error("another thread's call found")
	}
	if _, ok := c.Lookup("b", "t", 3, "x"); ok {
		t.Error("another tenant's call found (I8)")
	}
	// The next append extends the run; one that does not follow it starts
	// another; one older than the run's last leaves it.
	c.Remember(c.Gen(), "a", "t", 3, seqOf(nil, callsOf(message.Part{ToolCallID: "x", ToolName: "newer"})))
	if got := look(5, "x"); got != "newer" {
		t.Errorf("x after a newer call = %q", got)
	}
	if got := look(5, "y"); got != "why" {
		t.Errorf("y from the run's first append = %q", got)
	}
	c.Remember(c.Gen(), "a", "t", 2, seqOf(&text))
	if got := look(5, "x"); got != "newer" {
		t.Errorf("an older append's remembering replaced the run: %q", got)
	}
	c.Remember(c.Gen(), "a", "t", 9, seqOf(&text))
	if got := look(10, "y"); got != "?" {
		t.Errorf("a run after a gap holds the calls before it: %q", got)
	}
	// Past ToolLookback a call is not found (the log's lookup stops there).
	c.Remember(c.Gen(), "a", "t", 10, seqOf(callsOf(message.Part{ToolCallID: "old", ToolName: "o"})))
	many := make([]*message.Message, ToolLookback)
	c.Remember(c.Gen(), "a", "t", 11, slices.Values(many[:ToolLookback-1]))
	if got := look(11+ToolLookback-1, "old"); got != "o" {
		t.Errorf("a call within the lookback = %q", got)
	}
	c.Remember(c.Gen(), "a", "t", 11+ToolLookback-1, seqOf(nil))
	if got := look(11+ToolLookback, "old"); got != "?" {
		t.Errorf("a call past the lookback = %q, want unknown", got)
	}
	// The newest callsPerThread calls are kept.
	for i := range callsPerThread + 5 {
		after := int64(11 + ToolLookback + i)
		c.Remember(c.Gen(), "a", "t", after, seqOf(callsOf(message.Part{ToolCallID: string(rune('A' + i)), ToolName: "n"})))
	}
	last := int64(11 + ToolLookback + callsPerThread + 5)
	if got := look(last, "A"); got != "?" {
		t.Errorf("the oldest past the bound = %q, want unknown", got)
	}
	if got := look(last, string(rune('A'+callsPerThread+4))); got != "n" {
		t.Errorf("the newest = %q", got)
	}
	// Forget drops the thread, and a remembering of an append committed
	// before it.
	gen := c.Gen()
	c.Forget("a", "t")
	if got := look(last, string(rune('A'+callsPerThread+4))); got != "?" {
		t.Errorf("after Forget = %q", got)
	}
	c.Remember(gen, "a", "t", last, seqOf(callsOf(message.Part{ToolCallID: "q", ToolName: "stale"})))
	if got := look(last+1, "q"); got != "?" {
		t.Errorf("remembered across a Forget: %q", got)
	}
}

// TestCallCacheBounded: past callThreads threads, one is dropped for each
// new one; the new one is kept.
func TestCallCacheBounded(t *testing.T) {
	var c CallCache
	call := callsOf(message.Part{ToolCallID: "x", ToolName: "n"})
	for i := range callThreads + 10 {
		thread := string(rune('a'+i%26)) + string(rune(i))
		c.Remember(c.Gen(), "a", thread, 0, seqOf(call))
		if n, ok := c.Lookup("a", thread, 1, "x"); !ok || n != "n" {
			t.Fatalf("thread %d: the call just remembered is not found", i)
		}
	}
	if len(c.m) != callThreads {
		t.Errorf("%d threads kept, want %d", len(c.m), callThreads)
	}
}
