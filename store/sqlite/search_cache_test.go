package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme/eval"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/storetest"
)

// cacheCheck searches q on the cached path and by reading the thread, in
// the same store, and fails unless both give the same hits, scores and
// snippets. It returns how many hits there were.
func cacheCheck(t *testing.T, s *Store, tenant string, q store.SearchQuery) int {
	t.Helper()
	ctx := context.Background()
	var got [2][]store.Hit
	for i, p := range []searchPath{cachedThread, readThread} {
		s.searchPath = p
		hits, err := s.Search(ctx, tenant, q)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = hits
	}
	s.searchPath = bySize
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Fatalf("%s %+v: cached %v\nread %v", tenant, q, got[0], got[1])
	}
	return len(got[0])
}

// TestSearchCache: the cached path gives exactly what reading the thread
// gives while the thread grows (LoCoMo conversations appended a batch at a
// time, with notes between messages, searched with their questions after
// each batch), after a thread is deleted and made again with the same
// shape under a stopped clock (the same created, the same reused event
// ids, other content; even the same last message), and when the cache is
// too small for every thread.
func TestSearchCache(t *testing.T) {
	ctx := context.Background()
	convs, err := eval.LoadLoCoMo(storetest.LoCoMoDir)
	if err != nil {
		t.Fatal(err)
	}
	convs = convs[:3]
	s := openWithPath(t, bySize)
	type thread struct {
		id    string
		evs   []store.Event
		at    int
		qs    []string
		found int
	}
	var threads []*thread
	for _, c := range convs {
		th := &thread{id: "locomo-" + c.ID}
		for _, sess := range c.Sessions {
			for i, turn := range sess.Turns {
				m := message.NewText(message.User, turn.Speaker+": "+turn.Text)
				th.evs = append(th.evs, store.Event{Kind: store.KindMessage, Message: &m, At: sess.Date.Add(time.Duration(i) * time.Second)})
				if i%7 == 3 {
					th.evs = append(th.evs, store.Event{Kind: store.KindNote, Data: json.RawMessage(`{"n":1}`), At: sess.Date})
				}
			}
		}
		for _, qa := range c.Questions {
			th.qs = append(th.qs, qa.Question)
		}
		threads = append(threads, th)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for more := true; more; {
		more = false
		for _, th := range threads {
			if th.at == len(th.evs) {
				continue
			}
			more = true
			end := min(len(th.evs), th.at+1+rng.IntN(60))
			if _, err := s.Append(ctx, "locomo", th.id, int64(th.at), th.evs[th.at:end]); err != nil {
				t.Fatal(err)
			}
			th.at = end
			for range 4 {
				th.found += cacheCheck(t, s, "locomo", store.SearchQuery{Text: th.qs[rng.IntN(len(th.qs))], Thread: th.id, Limit: 1 + rng.IntN(20)})
			}
		}
	}
	for _, th := range threads {
		if th.found == 0 {
			t.Fatalf("%s: nothing found: the comparison shows nothing", th.id)
		}
	}

	// A thread made again: the clock stopped, so created is the same; its
	// events are the newest rows, so their ids are used again.
	r := openWithPath(t, bySize)
	stopped := time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return stopped }
	for round, word := range []string{"giraffe", "pelican", "giraffe"} {
		var evs []store.Event
		for i := range 30 {
			m := message.NewText(message.User, fmt.Sprintf("round %d: the %s number %d", round, word, i))
			evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
		}
		if _, err := r.Append(ctx, "z", "again", 0, evs); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"giraffe", "pelican", "round number", fmt.Sprintf(`"round %d"`, round)} {
			cacheCheck(t, r, "z", store.SearchQuery{Text: q, Thread: "again", Limit: 50})
		}
		hits, err := r.Search(ctx, "z", store.SearchQuery{Text: word, Thread: "again", Limit: 50})
		if err != nil || len(hits) != 30 || !strings.Contains(hits[0].Snippet, fmt.Sprintf("round %d", round)) {
			t.Fatalf("round %d: %d hits, %v, first %v", round, len(hits), err, hits)
		}
		if err := r.DeleteThread(ctx, "z", "again"); err != nil {
			t.Fatal(err)
		}
	}

	// Made again with the same last message, its ref chosen by the
	// caller: only the earlier messages differ. The seq, id, ref and terms
	// of the last message and the count are all the entry's.
	for round, word := range []string{"giraffe", "pelican"} {
		var evs []store.Event
		for i := range 29 {
			m := message.NewText(message.User, fmt.Sprintf("the %s number %d", word, i))
			evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
		}
		last := message.NewText(message.User, "that is all")
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &last, Ref: "the-end"})
		if _, err := r.Append(ctx, "z", "same", 0, evs); err != nil {
			t.Fatal(err)
		}
		hits, err := r.Search(ctx, "z", store.SearchQuery{Text: word, Thread: "same", Limit: 50})
		if err != nil || len(hits) != 29 {
			t.Fatalf("same last message, round %d: %d hits for %q, %v; want 29", round, len(hits), word, err)
		}
		cacheCheck(t, r, "z", store.SearchQuery{Text: "giraffe pelican", Thread: "same", Limit: 50})
		if err := r.DeleteThread(ctx, "z", "same"); err != nil {
			t.Fatal(err)
		}
	}

	// A cache smaller than the threads together: entries go and come back.
	c := &s.search.cache
	c.mu.Lock()
	var all int64 // the three threads' terms (their texts weigh too)
	for _, e := range c.threads {
		all += e.terms
	}
	c.max = all * 3 / 4
	c.mu.Unlock()
	held := map[int]bool{} // how many entries were held after a search
	for i := range 60 {
		th := threads[i%len(threads)]
		cacheCheck(t, s, "locomo", store.SearchQuery{Text: th.qs[i%len(th.qs)], Thread: th.id})
		c.mu.Lock()
		held[len(c.threads)] = true
		var sum int64
		for _, e := range c.threads {
			sum += e.weight
		}
		if sum != c.terms || c.terms > c.max {
			t.Fatalf("the cache counts %d terms, its entries weigh %d, its bound is %d", c.terms, sum, c.max)
		}
		c.mu.Unlock()
	}
	if held[len(threads)] || held[0] {
		t.Errorf("entries held after a search: %v; want some evicted, never all", held)
	}
}

// TestSearchCacheConcurrent: searches of a thread on the cached path while
// it grows, under the race detector; afterwards both paths agree.
func TestSearchCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openWithPath(t, bySize)
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda")
	var wg sync.WaitGroup
	done := make(chan struct{})
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				q := words[(g+i)%len(words)] + " " + words[(g*3+i)%len(words)]
				if _, err := s.Search(ctx, "c", store.SearchQuery{Text: q, Thread: "t"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 200 {
		m := message.NewText(message.User, fmt.Sprintf("%s %s %d", words[i%len(words)], words[(i*7)%len(words)], i))
		if _, err := s.Append(ctx, "c", "t", int64(i), []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	for _, w := range words {
		if cacheCheck(t, s, "c", store.SearchQuery{Text: w + " 7", Thread: "t", Limit: 100}) == 0 {
			t.Fatalf("%q: nothing found", w)
		}
	}
}

// BenchmarkSearchCache: auto-recall's pattern on SQLite, a message
// appended to a LoCoMo conversation's thread and then a search of it, with
// the postings cache and by reading the thread, side by side (CPU per
// search, the append excluded); and "first", each search the first of the
// thread since its entry went (a thread the cache has not seen, as at a
// proxied conversation's first recall), which builds the entry.
//
//	go test -run '^$' -bench SearchCache -benchtime 1000x ./store/sqlite/
func BenchmarkSearchCache(b *testing.B) {
	ctx := context.Background()
	convs, err := eval.LoadLoCoMo(storetest.LoCoMoDir)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		path  searchPath
		first bool
	}{{"cached", cachedThread, false}, {"read", readThread, false}, {"first", cachedThread, true}} {
		b.Run(p.name, func(b *testing.B) {
			s, err := Open(ctx, b.TempDir()+"/b.db")
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := storetest.LoadConversations(ctx, s, "locomo", convs[:1]); err != nil {
				b.Fatal(err)
			}
			thread := "locomo-" + convs[0].ID
			last, err := s.LastSeq(ctx, "locomo", thread)
			if err != nil {
				b.Fatal(err)
			}
			s.searchPath = p.path
			qs := convs[0].Questions
			var cpu time.Duration
			for i := 0; b.Loop(); i++ {
				m := message.NewText(message.User, qs[(i+7)%len(qs)].Question)
				if _, err := s.Append(ctx, "locomo", thread, last, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
					b.Fatal(err)
				}
				last++
				if p.first {
					c := &s.search.cache
					c.mu.Lock()
					c.threads, c.terms = nil, 0
					c.mu.Unlock()
				}
				c0 := storetest.CPUTime()
				if _, err := s.Search(ctx, "locomo", store.SearchQuery{Text: qs[i%len(qs)].Question, Thread: thread, Limit: 20}); err != nil {
					b.Fatal(err)
				}
				cpu += storetest.CPUTime() - c0
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "search-cpu-µs/op")
		})
	}
}

// TestMoveAhead: a thread's search that finds half a batch queued moves
// the queue into the index in the background (the group commit has not:
// fewer than indexBatch are queued); Close waits for it; the index then
// finds what the queue held, and nothing is left queued.
func TestMoveAhead(t *testing.T) {
	ctx := context.Background()
	s := openWithPath(t, bySize)
	queue := func() int64 { return s.queuedCount(t) }
	n := indexBatch/2 + 10
	var evs []store.Event
	for i := range n {
		m := message.NewText(message.User, fmt.Sprintf("queued message %d about refund INV-%d", i, 4000+i))
		evs = append(evs, store.Event{Kind: store.KindMessage, Message: &m})
	}
	if _, err := s.Append(ctx, "a", "small", 0, evs[:10]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Search(ctx, "a", store.SearchQuery{Text: "refund", Thread: "small"}); err != nil {
		t.Fatal(err)
	}
	s.ahead.Wait()
	if q := queue(); q != 10 {
		t.Fatalf("%d queued after a search with 10 queued, want 10 (nothing moved)", q)
	}
	if _, err := s.Append(ctx, "a", "big", 0, evs[10:]); err != nil {
		t.Fatal(err)
	}
	if q := queue(); q != int64(n) {
		t.Fatalf("%d queued before the search, want %d", q, n)
	}
	if _, err := s.Search(ctx, "a", store.SearchQuery{Text: "refund", Thread: "small"}); err != nil {
		t.Fatal(err)
	}
	s.ahead.Stop() // what Close does first
	if q := queue(); q != 0 {
		t.Fatalf("%d still queued after the background move", q)
	}
	for _, p := range []searchPath{readThread, useIndex} {
		s.searchPath = p
		hits, err := s.Search(ctx, "a", store.SearchQuery{Text: "INV-4200", Thread: "big"})
		if err != nil || len(hits) != 1 || hits[0].Seq != 191 {
			t.Fatalf("path %d finds %+v, %v; want seq 191 of big", p, hits, err)
		}
	}
}
