package backend

import (
	"sync"
	"sync/atomic"
	"time"
)

// MaxGroup bounds the requests one group commit takes, so that a long
// queue is committed in steps rather than in one ever-growing transaction.
const MaxGroup = 256

// Bounds of a leader's wait for the requests on their way (see gather).
const (
	minGather = 100 * time.Microsecond
	maxGather = 10 * time.Millisecond
)

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
//
// Before it commits, a leader waits for the requests on their way: those
// noted by Expect that are not in Do yet. It is woken when one of them
// queues or is given up, not by polling, and stops waiting when none is
// left, the group is full, or a commit's time has passed (see gather).
type GroupCommit[R Grouped] struct {
	// Leaders is the number of group transactions in flight at once
	// (0 means 1: SQLite has one writer; PostgreSQL can pipeline two).
	Leaders int

	mu      sync.Mutex
	joined  sync.Cond // on mu: a request queued, or one noted by Expect is done
	queue   []R
	leading int // commits in flight, at most Leaders

	// A request is on its way while it is noted (active) and neither
	// queued nor being committed (inside): active - inside is what a
	// gathering leader waits for.
	active, inside atomic.Int64
	gathering      atomic.Int32 // leaders waiting in gather
	lastBusy       atomic.Int64 // the last commit's time, in nanoseconds
	// wait, when set, replaces the bound derived from lastBusy (tests).
	wait time.Duration

	groups, requests, busy atomic.Int64 // for Stats (busy in nanoseconds)
}

// Expect notes a request from the moment its caller begins to prepare it
// until the caller is done with its outcome; the caller calls the
// returned func then. A leader waits, to let the requests being prepared
// join its group, only while some noted request is not in Do yet: a lone
// caller commits at once.
func (g *GroupCommit[R]) Expect() (done func()) {
	g.active.Add(1)
	return func() {
		g.active.Add(-1)
		// Paired with gather, which counts itself before it reads active:
		// either it sees this request gone or this sees it waiting.
		if g.gathering.Load() > 0 {
			g.mu.Lock()
			g.joined.Broadcast()
			g.mu.Unlock()
		}
	}
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
	return g.do(req, func() { g.serve(commit) })
}

// Stream is Do for a commit that writes its group's requests as they
// come: commit calls take for the next requests to write, until take
// returns none, and commits them all in one transaction. take returns the
// requests queued; when none is, it waits for those on their way, as a
// gathering leader waits for them (see gather), and returns none once the
// group is complete: none left on its way, the group full, or a commit's
// time passed since it began. The group is every request take returned.
//
// Do gathers a group and then writes it: with every writer of a group
// waiting for it, as many clients each appending to its thread do, the
// writer waited while the group's requests were being prepared, and they
// waited while it wrote. A streamed group is written while its last
// requests are being prepared: only its commit (WAL frames, fsync) is
// left once the last one arrives.
func (g *GroupCommit[R]) Stream(req R, commit func(take func() []R)) error {
	return g.do(req, func() { g.serveStream(commit) })
}

// do queues req and, when handed a commit slot, runs serve.
func (g *GroupCommit[R]) do(req R, serve func()) error {
	m := req.member()
	m.done, m.lead = make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	g.queue = append(g.queue, req)
	g.inside.Add(1)
	// A leader gathering takes this request: a second one would only
	// find the queue empty once the first is done waiting.
	lead := g.leading < max(1, g.Leaders) && g.gathering.Load() == 0
	if lead {
		g.leading++
	}
	g.joined.Broadcast()
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
				serve()
			default:
			}
			return m.Err
		case <-m.lead:
		}
	}
	serve()
	<-m.done // committed by this group or, past MaxGroup, a later one
	return m.Err
}

// serve commits one group from the queue with the commit slot its caller
// holds, then passes the slot to the first queued request not yet handed
// one, or frees it.
func (g *GroupCommit[R]) serve(commit func([]R)) {
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.gather()
	}
	n := min(len(g.queue), MaxGroup)
	batch := g.queue[:n:n]
	g.queue = append([]R(nil), g.queue[n:]...)
	if len(g.queue) > 0 && g.leading < max(1, g.Leaders) {
		// More than a group is queued and a slot is free: the next group
		// starts now, not when this one is committed.
		g.leading++
		g.handNext()
	}
	g.mu.Unlock()

	if len(batch) > 0 {
		start := time.Now()
		commit(batch)
		g.done(batch, time.Since(start))
	}
	g.release()
}

// done counts a group committed in d and tells its requests.
func (g *GroupCommit[R]) done(batch []R, d time.Duration) {
	g.groups.Add(1)
	g.requests.Add(int64(len(batch)))
	g.busy.Add(int64(d))
	g.lastBusy.Store(int64(d))
	// Its requests are on their way again from now: most come back with
	// the next append of their thread, before they are woken.
	g.inside.Add(-int64(len(batch)))
	for _, r := range batch {
		close(r.member().done)
	}
}

// release passes the commit slot its caller holds to the first queued
// request not yet handed one, or frees it.
func (g *GroupCommit[R]) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.handNext() {
		g.leading--
	}
}

// serveStream commits one group with the slot its caller holds, handing
// commit its requests as they come (Stream), then passes the slot on. Do
// keeps serve and gather: expressed through this (the whole group taken,
// then committed), PostgreSQL's two leaders formed groups of 15 to 19
// appends instead of 31 and lost a tenth of their rate, measured.
func (g *GroupCommit[R]) serveStream(commit func(take func() []R)) {
	if g.joined.L == nil {
		g.mu.Lock()
		if g.joined.L == nil {
			g.joined.L = &g.mu
		}
		g.mu.Unlock()
	}
	var (
		batch   []R
		waited  time.Duration // in take, not writing: not the commit's time
		timer   *time.Timer
		expired bool // under g.mu
	)
	// While the group is open, arrivals join it rather than lead (Do).
	g.gathering.Add(1)
	open := true
	closeGroup := func() { // g.mu held
		if open {
			open = false
			g.gathering.Add(-1)
		}
	}
	start := time.Now()
	take := func() []R {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !open {
			return nil
		}
		if int64(len(g.queue)) < streamChunk && len(batch) > 0 && g.active.Load() > g.inside.Load() {
			// The next requests are on their way: wait for them, for at
			// most a commit's time since the group began.
			w := time.Now()
			if timer == nil {
				limit := g.wait
				if limit <= 0 {
					limit = min(max(time.Duration(g.lastBusy.Load()), minGather), maxGather)
				}
				timer = time.AfterFunc(limit-time.Since(start), func() {
					g.mu.Lock()
					expired = true
					g.joined.Broadcast()
					g.mu.Unlock()
				})
			}
			for !expired && int64(len(g.queue)) < streamChunk && g.active.Load() > g.inside.Load() {
				g.joined.Wait()
			}
			waited += time.Since(w)
		}
		n := min(len(g.queue), MaxGroup-len(batch))
		if n == 0 {
			closeGroup()
			return nil
		}
		chunk := g.queue[:n:n]
		g.queue = append([]R(nil), g.queue[n:]...)
		batch = append(batch, chunk...)
		if len(batch) >= MaxGroup {
			closeGroup()
			if len(g.queue) > 0 && g.leading < max(1, g.Leaders) {
				// More than a group is queued and a slot is free: the
				// next group starts now.
				g.leading++
				g.handNext()
			}
		}
		return chunk
	}
	commit(take)
	if timer != nil {
		timer.Stop()
	}
	g.mu.Lock()
	closeGroup()
	g.mu.Unlock()
	if len(batch) > 0 {
		g.done(batch, time.Since(start)-waited)
	}
	g.release()
}

// handNext hands the slot its caller holds to the first queued request
// not yet handed one, and reports whether there was one. g.mu is held.
func (g *GroupCommit[R]) handNext() bool {
	for _, r := range g.queue {
		if m := r.member(); !m.handed {
			m.handed = true
			close(m.lead)
			return true
		}
	}
	return false
}

// gather waits, with g.mu held, until the requests on their way are
// queued, the queue holds a full group, or the last commit's time has
// passed (within minGather and maxGather): a request that takes longer
// to prepare (a read of its own, a large message) goes in the next group
// rather than hold this one for longer than a commit takes. A commit's
// callers come back as a crowd: the wait lets them share one commit.
func (g *GroupCommit[R]) gather() {
	if g.joined.L == nil {
		g.joined.L = &g.mu
	}
	g.gathering.Add(1)
	defer g.gathering.Add(-1)
	ready := func() bool {
		return len(g.queue) >= MaxGroup || g.active.Load() <= g.inside.Load()
	}
	if ready() {
		return
	}
	limit := g.wait
	if limit <= 0 {
		limit = min(max(time.Duration(g.lastBusy.Load()), minGather), maxGather)
	}
	expired := false
	t := time.AfterFunc(limit, func() {
		g.mu.Lock()
		expired = true
		g.joined.Broadcast()
		g.mu.Unlock()
	})
	defer t.Stop()
	for !expired && !ready() {
		g.joined.Wait()
	}
}

// streamChunk is how many queued requests a streamed group's take waits
// for while more are on their way: one at a time, the writer was woken for
// each arrival; in larger steps it waited as in a gathered group
// (BenchmarkDurableAppend/sqlite/32, 1, 2, 4, 8 and 16 alternated: 2 was
// ahead of a gathered group in each of six rounds, by about 6%).
const streamChunk = 2
