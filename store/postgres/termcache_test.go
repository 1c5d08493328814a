package postgres

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/postgres/pgtest"
)

// TestTermCacheFollowsThread: a replica that searches a thread while
// another replica appends to it, deletes it and writes it again (the same
// seqs, other words) finds what a replica without the cache finds, after
// every change; with a cache too small to hold both threads as well.
func TestTermCacheFollowsThread(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t, "mneme_t")
	open := func(t *testing.T) *Store {
		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, budget := range []int{termCacheBytes, 1} {
		t.Run(fmt.Sprintf("budget-%d", budget), func(t *testing.T) {
			cached, writer, plain := open(t), open(t), open(t)
			cached.terms = newTermCache(budget)
			plain.searchPath = readThread
			tenant := fmt.Sprintf("acme-%d", budget)
			queries := []store.SearchQuery{
				{Text: "payment gateway", Thread: "a"},
				{Text: "refund invoice INV-7", Thread: "a"},
				{Text: `"gateway timeout"`, Thread: "a", Limit: 3},
				{Text: "refund", Thread: "a", Role: message.Assistant},
				{Text: "payment refund", Thread: "a", FromSeq: 3, ToSeq: 9},
				{Text: "payment refund", Thread: "b"},
				{Text: "nothing matches this", Thread: "a"},
				{Text: "payment", Thread: "missing"},
			}
			check := func(step string) {
				t.Helper()
				for _, q := range queries {
					got, err := cached.Search(ctx, tenant, q)
					if err != nil {
						t.Fatalf("%s: %q: %v", step, q.Text, err)
					}
					want, err := plain.Search(ctx, tenant, q)
					if err != nil {
						t.Fatalf("%s: %q: %v", step, q.Text, err)
					}
					if !sameHits(got, want) {
						t.Errorf("%s: %+v:\ncached %v\nplain  %v", step, q, got, want)
					}
				}
			}
			words := [][]string{
				{"payment gateway timeout", "refund the invoice INV-7", "gateway timeout again", "payment refund"},
				{"a gateway and a payment", "refund refund refund", "timeout of the gateway", "INV-7 paid"},
			}
			appendN := func(thread string, after int64, n int, w []string) {
				t.Helper()
				evs := make([]store.Event, n)
				for i := range evs {
					role := message.User
					if i%2 == 1 {
						role = message.Assistant
					}
					m := message.NewText(role, fmt.Sprintf("%s %d", w[(int(after)+i)%len(w)], after+int64(i)))
					evs[i] = store.Event{Kind: store.KindMessage, Message: &m, Tokens: 5}
				}
				if _, err := writer.Append(ctx, tenant, thread, after, evs); err != nil {
					t.Fatal(err)
				}
			}
			check("empty")
			appendN("a", 0, 6, words[0])
			appendN("b", 0, 4, words[1])
			check("first appends")
			appendN("a", 6, 1, words[0])
			check("one more")
			if _, err := writer.Append(ctx, tenant, "a", 7, []store.Event{{Kind: store.KindNote, Data: []byte(`{"n":1}`)}}); err != nil {
				t.Fatal(err)
			}
			check("a note")
			appendN("a", 8, 4, words[0])
			check("after the note")
			// Lossy messages: a lexeme past tsvector's 256 positions, a
			// lexeme past its length.
			lossy := []string{strings.Repeat("gateway ", 300) + "payment refund", "refund " + strings.Repeat("x", 3000) + " INV-7 payment"}
			appendN("a", 12, 2, lossy)
			check("lossy messages")
			appendN("a", 14, 3, words[0])
			check("after the lossy ones")
			if err := writer.DeleteThread(ctx, tenant, "a"); err != nil {
				t.Fatal(err)
			}
			check("deleted")
			appendN("a", 0, 12, words[1])
			check("written again")
			appendN("a", 12, 2, words[0])
			check("grown again")
			// A thread past the small size is searched with the index.
			for after := int64(0); after < scanMessages+1; after += 500 {
				appendN("b", 4+after, 500, words[int(after/500)%2])
			}
			check("b large")
			appendN("b", 4+2500, 1, words[0])
			check("b larger")
		})
	}
}

func sameHits(a, b []store.Hit) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Thread != y.Thread || x.Seq != y.Seq || x.Ref != y.Ref || x.Role != y.Role || x.Tool != y.Tool ||
			!x.At.Equal(y.At) || x.Snippet != y.Snippet || math.Abs(x.Score-y.Score) > 1e-9*math.Max(1, y.Score) {
			return false
		}
	}
	return true
}
