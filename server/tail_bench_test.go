package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store"
)

// What BenchmarkProxyLatency's slowest requests are made of. probeStore
// times the appends and searches that reach the store (an append waits for
// its commit: the fsync, and a WAL checkpoint when the commit lands one);
// walProbe reads SQLite's WAL index to see a checkpoint move; the process's
// CPU during the request tells work done beside it (a background index
// move) from a wait (the disk's fsync tail).

// probeStore counts and times the store's appends and searches.
type probeStore struct {
	store.Store
	timed              atomic.Bool // a timed request is in flight: count its events
	mu                 sync.Mutex
	kinds              map[store.Kind]int // events the timed requests appended, by kind
	reqKinds           map[store.Kind]int // those of the request in flight
	bytes              int                // their messages' and data's bytes, roughly
	appends, searches  atomic.Int64
	appendNs, searchNs atomic.Int64
}

// Unwrap implements store.Unwrapper: the optional interfaces of the
// wrapped store are found through the probe.
func (p *probeStore) Unwrap() store.Store { return p.Store }

func (p *probeStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	if p.timed.Load() {
		p.count(evs)
	}
	start := time.Now()
	out, err := p.Store.Append(ctx, tenant, thread, after, evs)
	p.appendNs.Add(int64(time.Since(start)))
	p.appends.Add(1)
	return out, err
}

// count adds evs to the kinds and bytes appended.
func (p *probeStore) count(evs []store.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kinds == nil {
		p.kinds, p.reqKinds = map[store.Kind]int{}, map[store.Kind]int{}
	}
	for _, e := range evs {
		p.kinds[e.Kind]++
		p.reqKinds[e.Kind]++
		p.bytes += len(e.Data)
		if e.Message != nil {
			for _, pt := range e.Message.Parts {
				p.bytes += len(pt.Text) + len(pt.Arguments)
			}
		}
	}
}

// takeKinds returns the kinds of the events other than messages that
// the request in flight appended, and forgets them.
func (p *probeStore) takeKinds() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ks []string
	for k, n := range p.reqKinds {
		if k != store.KindMessage {
			ks = append(ks, fmt.Sprintf("%s×%d", k, n))
		}
	}
	clear(p.reqKinds)
	slices.Sort(ks)
	return strings.Join(ks, ",")
}

func (p *probeStore) Search(ctx context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
	start := time.Now()
	out, err := p.Store.Search(ctx, tenant, q)
	p.searchNs.Add(int64(time.Since(start)))
	p.searches.Add(1)
	return out, err
}

type probeCounts struct{ appends, searches, appendNs, searchNs int64 }

func (p *probeStore) counts() probeCounts {
	return probeCounts{p.appends.Load(), p.searches.Load(), p.appendNs.Load(), p.searchNs.Load()}
}

// walProbe reads the checkpoint's progress from a SQLite database's WAL
// index (the -shm file): nBackfill, the WAL frames copied into the
// database, at byte 96 after the two 48-byte copies of the index header.
// It moves when a checkpoint runs and goes back to 0 when the WAL
// restarts; mxFrame (byte 16) is the WAL's last frame.
type walProbe struct {
	path string
	f    *os.File
}

func (w *walProbe) read() (backfill, mxFrame uint32) {
	if w == nil {
		return 0, 0
	}
	if w.f == nil {
		f, err := os.Open(w.path)
		if err != nil {
			return 0, 0
		}
		w.f = f
	}
	var b [100]byte
	if _, err := w.f.ReadAt(b[:], 0); err != nil {
		return 0, 0
	}
	return binary.LittleEndian.Uint32(b[96:]), binary.LittleEndian.Uint32(b[16:])
}

func (w *walProbe) close() {
	if w != nil && w.f != nil {
		w.f.Close()
	}
}

// reqTrace is what one proxied request did.
type reqTrace struct {
	over, cpu         time.Duration // overhead over direct, its CPU
	class             string
	appends, searches int64
	appendD, searchD  time.Duration
	ckpt              bool // the WAL checkpoint moved during the request
	frames            uint32
	turn              int       // the request's place in its conversation (1: the first after the untimed start)
	gcs               [2]uint32 // runtime.MemStats.NumGC before and after the request
	gcAfter           bool      // a GC cycle ended before the next request began: its mark phase may have overlapped this one
	kinds             string    // the events other than messages it appended (a step's)
}

func (r reqTrace) String() string {
	s := fmt.Sprintf("turn %2d over %5.1fms cpu %5.1fms %-9s appends %d (%5.1fms) searches %d (%5.1fms) wal+%d",
		r.turn, ms(r.over), ms(r.cpu), r.class, r.appends, ms(r.appendD), r.searches, ms(r.searchD), r.frames)
	if r.ckpt {
		s += " checkpoint"
	}
	if r.gcAfter {
		s += " gc-after"
	}
	if r.kinds != "" {
		s += " +" + r.kinds
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// cause names what a slow request is mostly made of: the largest of its
// appends beyond one fsync (a "checkpoint" when the WAL checkpoint moved
// during the request, else a "slow-append": a wait on the disk's fsync
// tail or on the write lock), its searches (auto-recall's, "search"), and
// the rest of its overhead. The rest is a "compaction" step (compacted,
// masked or reflected events), a "recall-step" (a step that only
// replaced the recalled block: a note), a "gc" (one ended during the
// request) or "gc-after" (one ended before the next: its marking
// overlapped), "cpu" (the process's CPU well over the steady median: work
// beside the request, such as a background index move), else "other".
func (r reqTrace) cause(fsync, cpuMedian time.Duration) string {
	app, rest := r.appendD-fsync, r.over-r.appendD-r.searchD
	switch {
	case app >= r.searchD && app >= rest:
		if r.ckpt {
			return "checkpoint"
		}
		return "slow-append"
	case r.searchD >= rest:
		return "search"
	case r.class == "compacted" && (strings.Contains(r.kinds, "compacted") || strings.Contains(r.kinds, "masked") || strings.Contains(r.kinds, "reflected")):
		return "compaction"
	case r.class == "compacted":
		return "recall-step"
	case r.class == "gc":
		return "gc"
	case r.gcAfter:
		return "gc-after"
	case r.cpu > 2*cpuMedian:
		return "cpu"
	}
	return "other"
}

var causes = []string{"checkpoint", "slow-append", "search", "compaction", "recall-step", "gc", "gc-after", "cpu", "other"}

// reportTail reports what the requests at or over the overhead's p99 are
// made of (the share of each cause), the steady requests' append time, and
// logs the slowest ones.
func reportTail(b *testing.B, trs []reqTrace, fsyncP50 time.Duration, sqlite bool) {
	if len(trs) == 0 {
		return
	}
	for i := range trs[:len(trs)-1] {
		trs[i].gcAfter = trs[i+1].gcs[0] != trs[i].gcs[1]
	}
	var steadyAppend, steadyCPU []time.Duration
	for _, r := range trs {
		if r.class == "steady" {
			steadyAppend = append(steadyAppend, r.appendD)
			steadyCPU = append(steadyCPU, r.cpu)
		}
	}
	cpuMedian := time.Duration(0)
	if len(steadyAppend) > 0 {
		b.ReportMetric(percentile(steadyAppend, 0.5), "steady-append-p50-µs")
		b.ReportMetric(percentile(steadyAppend, 0.99), "steady-append-p99-µs")
		cpuMedian = time.Duration(percentile(steadyCPU, 0.5)) * time.Microsecond
	}
	var n, searches, ckpts int
	for _, r := range trs {
		searches += int(r.searches)
		if r.ckpt {
			ckpts++
		}
		n++
	}
	b.ReportMetric(float64(searches)/float64(n), "searches/req")
	if sqlite {
		b.ReportMetric(float64(ckpts)/float64(n), "checkpoint-share")
	}
	sorted := slices.Clone(trs)
	slices.SortFunc(sorted, func(a, b reqTrace) int { return int(b.over - a.over) })
	tail := sorted[:max(1, len(sorted)/100)]
	count := map[string]int{}
	var lines []string
	for _, r := range tail {
		c := r.cause(fsyncP50, cpuMedian)
		count[c]++
		lines = append(lines, fmt.Sprintf("%-11s %s", c, r))
	}
	for _, c := range causes {
		if count[c] > 0 {
			b.ReportMetric(float64(count[c])/float64(len(tail)), "tail-"+c+"-share")
		}
	}
	// By the request's place in its conversation: how many compacted,
	// and the median overhead (a step follows a conversation's start).
	byTurn := map[int][]time.Duration{}
	searchesByTurn := map[int][]time.Duration{}
	stepped := map[int]int{}
	for _, r := range trs {
		byTurn[r.turn] = append(byTurn[r.turn], r.over)
		searchesByTurn[r.turn] = append(searchesByTurn[r.turn], r.searchD)
		if r.class == "compacted" {
			stepped[r.turn]++
		}
	}
	var turns []string
	for t := range cycleTurns + 1 {
		if ds := byTurn[t]; len(ds) > 0 {
			turns = append(turns, fmt.Sprintf("turn %d: %d of %d compacted, overhead p50 %.0f µs, its searches p50 %.0f µs", t, stepped[t], len(ds), percentile(ds, 0.5), percentile(searchesByTurn[t], 0.5)))
		}
	}
	b.Logf("by turn:\n%s", strings.Join(turns, "\n"))
	b.Logf("slowest %d of %d requests (fsync p50 %v, steady CPU median %v):\n%s", len(tail), len(trs), fsyncP50, cpuMedian, strings.Join(lines, "\n"))
}
