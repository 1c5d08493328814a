package backend

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MaxGroup bounds the requests one group commit takes, so that a long
// queue is committed in steps rather than in one ever-growing transaction.
const MaxGroup = 256

// GroupMember is what a GroupCommit keeps of each request. A backend's
// request type embeds it; the commit function sets Err on every request of
// its batch.
type GroupMember struct {
	// Err is the request's outcome, final once its group has committed.
	Err    error
	done   chan struct{} // closed when Err is final
	lead   chan struct{} // closed when the request is handed a commit slot
	handed bool          // lead is closed (under GroupCommit.mu)
}

func (m *GroupMember) member() *GroupMember { return m }

// Grouped is a request that embeds GroupMember.
type Grouped interface{ member() *GroupMember }

// GroupCommit is a group commit with no goroutine of its own: a request
// that finds a commit slot free commits what is queued; those that arrive
// while every slot is busy queue, and the first of them commits them all
// in one transaction once a slot frees. Leadership passes from one waiting
// request to the next. The zero value has one slot.
type GroupCommit[R Grouped] struct {
	// Leaders is the number of group transactions in flight at once
	// (0 means 1: SQLite has one writer; PostgreSQL can pipeline two).
	Leaders int

	mu      sync.Mutex
	queue   []R
	leading int // commits in flight, at most Leaders

	groups, requests, busy atomic.Int64 // for Stats (busy in nanoseconds)
	active                 atomic.Int64 // requests noted by Expect and not done
}

// Expect notes a request from the moment its caller begins to prepare it
// until the caller is done with its outcome; the caller calls the
// returned func then. A leader yields, to let the requests being prepared
// join its group, only while some noted request is not queued yet: a lone
// caller commits at once.
func (g *GroupCommit[R]) Expect() (done func()) {
	g.active.Add(1)
	return func() { g.active.Add(-1) }
}

// GroupStats counts what a GroupCommit has committed: Requests over Groups
// is how many requests shared a commit (and so, on SQLite, one fsync).
type GroupStats struct {
	Groups, Requests int64
	// Busy is the time spent in commit functions: with one commit slot
	// (SQLite's one writer), the serial part of every append, and so the
	// bound on the rate however many cores there are.
	Busy time.Duration
}

// Stats returns the groups and requests committed so far.
func (g *GroupCommit[R]) Stats() GroupStats {
	return GroupStats{Groups: g.groups.Load(), Requests: g.requests.Load(), Busy: time.Duration(g.busy.Load())}
}

// Do queues req and returns its Err once its group has committed (or
// failed). commit runs a batch in one transaction and sets each one's Err.
func (g *GroupCommit[R]) Do(req R, commit func([]R)) error {
	m := req.member()
	m.done, m.lead = make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	g.queue = append(g.queue, req)
	lead := g.leading < max(1, g.Leaders)
	if lead {
		g.leading++
	}
	g.mu.Unlock()
	if !lead {
		// The wait ignores ctx: a request handed to a commit must learn
		// whether it is durable.
		select {
		case <-m.done:
			// Handed a commit slot too, then committed by another group:
			// the slot must still be used or passed on.
			select {
			case <-m.lead:
				g.serve(commit)
			default:
			}
			return m.Err
		case <-m.lead:
		}
	}
	g.serve(commit)
	<-m.done // committed by this group or, past MaxGroup, a later one
	return m.Err
}

// serve commits one group from the queue with the commit slot its caller
// holds, then passes the slot to the first queued request not yet handed
// one, or frees it.
func (g *GroupCommit[R]) serve(commit func([]R)) {
	// Let the requests on their way join: yield while some noted by
	// Expect are not queued and each yield brings more of them (a
	// commit's callers come back as a crowd). A lone request does not
	// yield.
	for seen := 0; ; {
		g.mu.Lock()
		n := len(g.queue)
		g.mu.Unlock()
		if n == seen || n >= MaxGroup || int64(n) >= g.active.Load() {
			break
		}
		seen = n
		runtime.Gosched()
	}
	g.mu.Lock()
	n := min(len(g.queue), MaxGroup)
	batch := g.queue[:n:n]
	g.queue = append([]R(nil), g.queue[n:]...)
	g.mu.Unlock()

	if len(batch) > 0 {
		g.groups.Add(1)
		g.requests.Add(int64(len(batch)))
		start := time.Now()
		commit(batch)
		g.busy.Add(int64(time.Since(start)))
		for _, r := range batch {
			close(r.member().done)
		}
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.queue {
		if m := r.member(); !m.handed {
			m.handed = true
			close(m.lead)
			return
		}
	}
	g.leading--
}
