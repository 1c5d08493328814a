package api

import (
	"fmt"
	"testing"

	"github.com/mnemehq/mneme"
)

// TestHistoryRing: each thread keeps its last points, oldest first, and
// the number of threads is bounded (the least recently written goes).
func TestHistoryRing(t *testing.T) {
	for _, tc := range []struct {
		perThread, writes int
		want              string
	}{
		{3, 2, "[1 2]"},
		{3, 3, "[1 2 3]"},
		{3, 7, "[5 6 7]"},
		{1, 4, "[4]"},
	} {
		t.Run(fmt.Sprint(tc.perThread, "x", tc.writes), func(t *testing.T) {
			h := NewHistory(tc.perThread, 2)
			for i := 1; i <= tc.writes; i++ {
				h.Record("t", "a", mneme.Usage{LastSeq: int64(i)})
			}
			var got []int64
			for _, p := range h.Points("t", "a") {
				got = append(got, p.LastSeq)
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("got %v, want %s", got, tc.want)
			}
		})
	}
	h := NewHistory(5, 2)
	h.Record("t", "a", mneme.Usage{})
	h.Record("t", "b", mneme.Usage{})
	h.Record("t", "a", mneme.Usage{})
	h.Record("t", "c", mneme.Usage{}) // b is the least recently written
	if len(h.Points("t", "b")) != 0 || len(h.Points("t", "a")) != 2 || len(h.Points("t", "c")) != 1 {
		t.Errorf("eviction: a %d, b %d, c %d", len(h.Points("t", "a")), len(h.Points("t", "b")), len(h.Points("t", "c")))
	}
	if len(h.Points("other-tenant", "a")) != 0 {
		t.Error("points leak across tenants")
	}
}
