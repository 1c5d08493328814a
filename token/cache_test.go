package token

import (
	"fmt"
	"sync"
	"testing"

	"github.com/mnemehq/mneme/message"
)

// countingCounter counts how often Count is called, to see the cache work.
type countingCounter struct {
	Counter
	mu    sync.Mutex
	calls int
}

func (c *countingCounter) Count(s string) int {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.Counter.Count(s)
}

func TestCacheCountsOnce(t *testing.T) {
	base, _ := Get(O200kBase)
	cnt := &countingCounter{Counter: base}
	c := NewCache()
	msgs := thread(200)
	tests := []struct {
		name string
		key  func(i int) string
	}{
		{"by ref", func(i int) string { return fmt.Sprintf("t1/%d", i) }},
		{"by content", func(int) string { return "" }},
	}
	for _, tt := range tests {
		var first []int
		for i, m := range msgs {
			first = append(first, c.MessageTokens(cnt, tt.key(i), m))
		}
		calls := cnt.calls
		for i, m := range msgs {
			if got := c.MessageTokens(cnt, tt.key(i), m); got != first[i] {
				t.Errorf("%s: message %d: %d then %d", tt.name, i, first[i], got)
			}
			if want := MessageTokens(base, m); first[i] != want {
				t.Errorf("%s: message %d: cached %d, direct %d", tt.name, i, first[i], want)
			}
		}
		if cnt.calls != calls {
			t.Errorf("%s: second pass counted %d times", tt.name, cnt.calls-calls)
		}
	}
}

func TestCacheKeyedByCounter(t *testing.T) {
	o, _ := Get(O200kBase)
	cl, _ := Get("claude")
	c := NewCache()
	m := message.NewText(message.User, "the same message, counted two ways")
	if a, b := c.MessageTokens(o, "k", m), c.MessageTokens(cl, "k", m); a == b || b != MessageTokens(cl, m) {
		t.Errorf("o200k %d, claude %d (want %d)", a, b, MessageTokens(cl, m))
	}
}

func TestCacheContentKeyDistinguishes(t *testing.T) {
	c, _ := Get(O200kBase)
	cache := NewCache()
	a := message.NewText(message.User, "short")
	b := message.NewText(message.User, "a rather longer message than the first")
	if x, y := cache.MessageTokens(c, "", a), cache.MessageTokens(c, "", b); x == y {
		t.Errorf("distinct messages share a count: %d", x)
	}
}

func TestCacheBounded(t *testing.T) {
	c, _ := Get(Cl100kBase)
	cache := NewCacheSize(100)
	m := message.NewText(message.User, "x")
	for i := range 1000 {
		cache.MessageTokens(c, fmt.Sprint(i), m)
		if n := cache.Len(); n > 100 {
			t.Fatalf("after %d inserts the cache holds %d > 100", i+1, n)
		}
	}
	// A key in steady use survives rotations.
	cache.MessageTokens(c, "hot", m)
	cnt := &countingCounter{Counter: c}
	for i := range 1000 {
		cache.MessageTokens(c, fmt.Sprint("cold", i), m)
		cache.MessageTokens(cnt, "hot", m)
	}
	if cnt.calls != 0 {
		t.Errorf("hot key recounted %d times", cnt.calls)
	}
}

func TestCacheZeroValueAndConcurrency(t *testing.T) {
	c, _ := Get(O200kBase)
	var cache Cache
	msgs := thread(100)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i, m := range msgs {
				if got, want := cache.MessageTokens(c, fmt.Sprint(i), m), MessageTokens(c, m); got != want {
					t.Errorf("message %d: %d, want %d", i, got, want)
				}
			}
		})
	}
	wg.Wait()
	if cache.Len() != len(msgs) {
		t.Errorf("Len = %d, want %d", cache.Len(), len(msgs))
	}
}

func TestCacheInvalidRaw(t *testing.T) {
	c, _ := Get(O200kBase)
	m := message.Message{Role: message.User, Parts: []message.Part{{Type: message.Opaque, Raw: []byte("{not json")}}}
	if got, want := NewCache().MessageTokens(c, "", m), MessageTokens(c, m); got != want {
		t.Errorf("%d, want %d", got, want)
	}
}
