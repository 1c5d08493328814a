package backend

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testReq is a request of the tests' group commits.
type testReq struct {
	id        int
	committed atomic.Int32 // how many commits took it
	GroupMember
}

var errOdd = errors.New("odd request")

// TestGroupCommitOnce: every request is committed exactly once, learns its
// own outcome, and no more than Leaders commits run at once, whatever the
// interleaving of many writers.
func TestGroupCommitOnce(t *testing.T) {
	for _, leaders := range []int{0, 1, 2, 3} {
		t.Run(fmt.Sprintf("leaders=%d", leaders), func(t *testing.T) {
			g := &GroupCommit[*testReq]{Leaders: leaders}
			var inFlight, most atomic.Int32
			commit := func(batch []*testReq) {
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if len(batch) == 0 || len(batch) > MaxGroup {
					t.Errorf("batch of %d", len(batch))
				}
				for _, r := range batch {
					r.committed.Add(1)
					if r.id%2 == 1 {
						r.Err = errOdd
					}
				}
				runtime.Gosched() // let other commits overlap if they can
				inFlight.Add(-1)
			}
			const writers, each = 40, 50
			reqs := make([]*testReq, writers*each)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						r := &testReq{id: w*each + i}
						reqs[r.id] = r
						func() {
							defer g.Expect()()
							var want error
							if r.id%2 == 1 {
								want = errOdd
							}
							if err := g.Do(r, commit); err != want {
								t.Errorf("request %d: %v, want %v", r.id, err, want)
							}
						}()
					}
				}()
			}
			wg.Wait()
			for _, r := range reqs {
				if n := r.committed.Load(); n != 1 {
					t.Errorf("request %d committed %d times", r.id, n)
				}
			}
			if m := most.Load(); m > int32(max(1, leaders)) {
				t.Errorf("%d commits at once, Leaders %d", m, leaders)
			}
			if s := g.Stats(); s.Requests != writers*each || s.Groups > s.Requests {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestGroupCommitGathers: a leader waits for every request noted by
// Expect, however late it queues, and commits them all in one group.
func TestGroupCommitGathers(t *testing.T) {
	g := &GroupCommit[*testReq]{wait: time.Hour}
	const n = 20
	dones := make([]func(), n)
	for i := range dones {
		dones[i] = g.Expect()
	}
	commit := func(batch []*testReq) {}
	var wg sync.WaitGroup
	first := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer dones[i]()
			if i > 0 {
				<-first // the first is leading (and so gathering) before the others queue
			}
			if err := g.Do(&testReq{id: i}, commit); err != nil {
				t.Error(err)
			}
		}()
		if i == 0 {
			for g.gathering.Load() == 0 {
				runtime.Gosched()
			}
			close(first)
		}
	}
	wg.Wait()
	if s := g.Stats(); s.Groups != 1 || s.Requests != n {
		t.Errorf("stats %+v, want %d requests in one group", s, n)
	}
}

// TestGroupCommitGivenUp: a noted request that ends without queuing (its
// preparation failed) releases a leader waiting for it.
func TestGroupCommitGivenUp(t *testing.T) {
	g := &GroupCommit[*testReq]{wait: time.Hour}
	done1, done2 := g.Expect(), g.Expect()
	errc := make(chan error)
	go func() {
		defer done1()
		errc <- g.Do(&testReq{}, func([]*testReq) {})
	}()
	for g.gathering.Load() == 0 {
		runtime.Gosched()
	}
	done2()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.Groups != 1 || s.Requests != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestGroupCommitBounded: a noted request that takes long to queue does
// not hold the leader's group past its bound.
func TestGroupCommitBounded(t *testing.T) {
	g := &GroupCommit[*testReq]{wait: time.Millisecond}
	late := g.Expect()
	defer late()
	defer g.Expect()()
	if err := g.Do(&testReq{}, func([]*testReq) {}); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.Groups != 1 || s.Requests != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestGroupCommitLoneWriter: a request nobody else is noted beside is
// committed at once, without waiting for anything.
func TestGroupCommitLoneWriter(t *testing.T) {
	g := &GroupCommit[*testReq]{wait: time.Hour}
	for range 3 {
		func() {
			defer g.Expect()()
			if err := g.Do(&testReq{}, func([]*testReq) {}); err != nil {
				t.Fatal(err)
			}
		}()
	}
	if s := g.Stats(); s.Groups != 3 {
		t.Errorf("stats %+v", s)
	}
}
