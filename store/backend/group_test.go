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

// modes are the two ways a group is committed, each given a commit of the
// whole group: gathered (Do), and streamed (Stream), whose commit takes
// the group's requests as they come.
var modes = []struct {
	name string
	do   func(g *GroupCommit[*testReq], r *testReq, commit func([]*testReq)) error
}{
	{"gathered", func(g *GroupCommit[*testReq], r *testReq, commit func([]*testReq)) error {
		return g.Do(r, commit)
	}},
	{"streamed", func(g *GroupCommit[*testReq], r *testReq, commit func([]*testReq)) error {
		return g.Stream(r, func(take func() []*testReq) {
			var all []*testReq
			for c := take(); len(c) > 0; c = take() {
				all = append(all, c...)
				runtime.Gosched() // writing: let others queue meanwhile
			}
			if len(all) > 0 {
				commit(all)
			}
		})
	}},
}

// TestGroupCommitOnce: every request is committed exactly once, learns its
// own outcome, and no more than Leaders commits run at once, whatever the
// interleaving of many writers.
func TestGroupCommitOnce(t *testing.T) {
	for _, mode := range modes {
		for _, leaders := range []int{0, 1, 2, 3} {
			t.Run(fmt.Sprintf("%s/leaders=%d", mode.name, leaders), func(t *testing.T) {
				testGroupCommitOnce(t, leaders, mode.do)
			})
		}
	}
}

func testGroupCommitOnce(t *testing.T, leaders int, do func(*GroupCommit[*testReq], *testReq, func([]*testReq)) error) {
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
					if err := do(g, r, commit); err != want {
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
}

// TestGroupCommitGathers: a leader waits for every request noted by
// Expect, however late it queues, and commits them all in one group.
func TestGroupCommitGathers(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
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
					if err := mode.do(g, &testReq{id: i}, commit); err != nil {
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
		})
	}
}

// TestGroupCommitGivenUp: a noted request that ends without queuing (its
// preparation failed) releases a leader waiting for it.
func TestGroupCommitGivenUp(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			g := &GroupCommit[*testReq]{wait: time.Hour}
			done1, done2 := g.Expect(), g.Expect()
			errc := make(chan error)
			go func() {
				defer done1()
				errc <- mode.do(g, &testReq{}, func([]*testReq) {})
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
		})
	}
}

// TestGroupCommitBounded: a noted request that takes long to queue does
// not hold the leader's group past its bound.
func TestGroupCommitBounded(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			g := &GroupCommit[*testReq]{wait: time.Millisecond}
			late := g.Expect()
			defer late()
			defer g.Expect()()
			if err := mode.do(g, &testReq{}, func([]*testReq) {}); err != nil {
				t.Fatal(err)
			}
			if s := g.Stats(); s.Groups != 1 || s.Requests != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestGroupCommitLoneWriter: a request nobody else is noted beside is
// committed at once, without waiting for anything.
func TestGroupCommitLoneWriter(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			g := &GroupCommit[*testReq]{wait: time.Hour}
			for range 3 {
				func() {
					defer g.Expect()()
					if err := mode.do(g, &testReq{}, func([]*testReq) {}); err != nil {
						t.Fatal(err)
					}
				}()
			}
			if s := g.Stats(); s.Groups != 3 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestGroupCommitStreams: a streamed group's commit is handed its first
// request before the others noted beside it have queued (they queue only
// once it is being written), then the others as they queue: all in one
// group.
func TestGroupCommitStreams(t *testing.T) {
	g := &GroupCommit[*testReq]{wait: time.Hour}
	const n = 5
	dones := make([]func(), n)
	for i := range dones {
		dones[i] = g.Expect()
	}
	writing := make(chan struct{})
	var takes [][]int // on the leader only
	commit := func(take func() []*testReq) {
		for c := take(); len(c) > 0; c = take() {
			var ids []int
			for _, r := range c {
				ids = append(ids, r.id)
			}
			takes = append(takes, ids)
			if len(takes) == 1 {
				close(writing)
			}
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer dones[i]()
			if i > 0 {
				<-writing
			}
			if err := g.Stream(&testReq{id: i}, commit); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(takes) < 2 || len(takes[0]) != 1 || takes[0][0] != 0 {
		t.Errorf("takes %v, want [0] first and the others after it", takes)
	}
	if s := g.Stats(); s.Groups != 1 || s.Requests != n {
		t.Errorf("stats %+v, want %d requests in one group", s, n)
	}
}
