package api

import (
	"sync"
	"time"

	"github.com/mnemehq/mneme"
)

// Point is one model call's window, as the usage chart plots it.
type Point struct {
	At        time.Time `json:"at"`
	LastSeq   int64     `json:"last_seq"`
	Total     int       `json:"total"`
	Budget    int       `json:"budget"`
	Trigger   int       `json:"trigger"`
	Target    int       `json:"target"`
	Compacted bool      `json:"compacted,omitempty"` // this call took a compaction step
}

// History remembers the last windows of each thread in memory (a bounded
// ring per thread, a bounded number of threads): the per-call window sizes
// the inspector's chart draws. Feed it from mneme.Config.OnUsage with
// Record. It is safe for concurrent use; the zero value is not: use
// NewHistory.
type History struct {
	perThread, threads int

	mu   sync.Mutex
	tick uint64
	m    map[threadKey]*ring
}

type ring struct {
	used   uint64
	points []Point
	next   int // where the next point goes once full
}

// NewHistory keeps up to perThread points for each of up to threads
// threads (defaults 1,000 and 1,000 when <= 0).
func NewHistory(perThread, threads int) *History {
	if perThread <= 0 {
		perThread = 1000
	}
	if threads <= 0 {
		threads = 1000
	}
	return &History{perThread: perThread, threads: threads, m: map[threadKey]*ring{}}
}

// Record adds one window's usage: use it as (or call it from)
// mneme.Config.OnUsage.
func (h *History) Record(tenant, thread string, u mneme.Usage) {
	p := Point{At: time.Now().UTC(), LastSeq: u.LastSeq, Total: u.Total, Budget: u.Budget, Trigger: u.Trigger, Target: u.Target, Compacted: u.Step}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tick++
	k := threadKey{tenant, thread}
	r := h.m[k]
	if r == nil {
		if len(h.m) >= h.threads {
			h.dropOldestLocked()
		}
		r = &ring{}
		h.m[k] = r
	}
	r.used = h.tick
	if len(r.points) < h.perThread {
		r.points = append(r.points, p)
		return
	}
	r.points[r.next] = p
	r.next = (r.next + 1) % h.perThread
}

// Points returns the thread's recorded windows, oldest first.
func (h *History) Points(tenant, thread string) []Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.m[threadKey{tenant, thread}]
	if r == nil {
		return []Point{}
	}
	out := make([]Point, 0, len(r.points))
	out = append(out, r.points[r.next:]...)
	return append(out, r.points[:r.next]...)
}

// Forget drops a thread's points (after a delete).
func (h *History) Forget(tenant, thread string) {
	h.mu.Lock()
	delete(h.m, threadKey{tenant, thread})
	h.mu.Unlock()
}

func (h *History) dropOldestLocked() {
	var oldest threadKey
	at := ^uint64(0)
	for k, r := range h.m {
		if r.used < at {
			oldest, at = k, r.used
		}
	}
	delete(h.m, oldest)
}

type threadKey struct{ tenant, id string }
