package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
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
	appends, searches  atomic.Int64
	appendNs, searchNs atomic.Int64
}

// Unwrap implements store.Unwrapper: the optional interfaces of the
// wrapped store are found through the probe.
func (p *probeStore) Unwrap() store.Store { return p.Store }

func (p *probeStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	start := time.Now()
	out, err := p.Store.Append(ctx, tenant, thread, after, evs)
	p.appendNs.Add(int64(time.Since(start)))
	p.appends.Add(1)
	return out, err
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
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// cause names what a slow request is made of, first match: a compaction
// step or a search (auto-recall) on the request path, a checkpoint, a GC,
// more than the one append, an append slower than slowAppend (a wait: the
// disk's fsync tail or the write lock), a GC that ended soon after (whose
// marking began during the request), CPU well over the steady median (work
// beside the request: a background index move), else other.
func (r reqTrace) cause(slowAppend, cpuMedian time.Duration) string {
	switch {
	case r.class == "compacted":
		return "compacted"
	case r.searches > 0:
		return "search"
	case r.ckpt:
		return "checkpoint"
	case r.class == "gc":
		return "gc"
	case r.appends > 1:
		return "appends"
	case r.appendD > slowAppend:
		return "slow-append"
	case r.gcAfter:
		return "gc-after"
	case r.cpu > 2*cpuMedian:
		return "cpu"
	}
	return "other"
}

var causes = []string{"compacted", "search", "checkpoint", "gc", "appends", "slow-append", "gc-after", "cpu", "other"}

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
		if r.class == "steady" && r.searches == 0 {
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
	slowAppend := 2*fsyncP50 + time.Millisecond
	count := map[string]int{}
	var lines []string
	for _, r := range tail {
		c := r.cause(slowAppend, cpuMedian)
		count[c]++
		lines = append(lines, fmt.Sprintf("%-11s %s", c, r))
	}
	for _, c := range causes {
		if count[c] > 0 {
			b.ReportMetric(float64(count[c])/float64(len(tail)), "tail-"+c+"-share")
		}
	}
	b.Logf("slowest %d of %d requests (slow append > %v, steady CPU median %v):\n%s", len(tail), len(trs), slowAppend, cpuMedian, strings.Join(lines, "\n"))
}
