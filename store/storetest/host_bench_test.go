package storetest

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkHost measures the machine the speed figures run on, so that
// rounds taken on different hosts can be told apart (scripts/bench-speed
// prints it first). The bars are absolute, and the same commit has given
// 20,000 appends a second from 32 threads on one host and 4,500 to 7,000
// on another whose cores count tokens as fast: what differs is what SQLite's
// B-trees, FTS5's hash and the WAL's writes lean on, memory latency past
// the caches and the cost of a system call. So it reports:
//
//   - mem-ns@64KB, @1MB, @8MB, @64MB: one load's latency in a random walk
//     over that much memory (each load's address is the one before's
//     value, so none overlaps another): the first is a core's cache, the
//     last main memory;
//   - copy-GB/s: copying 8 MB, as writing and checksumming pages does;
//   - syscall-ns: the cheapest system call (getppid);
//   - pread-ns, pwrite-ns: reading and writing one 4 KB page of a file
//     in the page cache, as SQLite reads a page and writes a WAL frame;
//   - fsync-µs: one page written and synced, the median of 101
//     (FsyncMedian, the append rows' fsync-µs);
//   - work-µs-min, work-µs-p50, work-µs-p90: a fixed piece of arithmetic
//     (no memory), 51 times: on a quiet host the three are close, and on
//     a host whose other tenants take the core they part;
//   - steal-%: the share of the machine's CPU time its hypervisor gave
//     other guests while this ran (Linux's /proc/stat; not reported where
//     it cannot be read).
//
// Each other figure is the median of five runs.
func BenchmarkHost(b *testing.B) {
	for range b.N {
		steal0, total0, stealOK := stealTime()
		work := make([]float64, 51)
		for i := range work {
			work[i] = arithmetic()
		}
		slices.Sort(work)
		b.ReportMetric(work[0], "work-µs-min")
		b.ReportMetric(work[len(work)/2], "work-µs-p50")
		b.ReportMetric(work[len(work)*9/10], "work-µs-p90")
		for _, size := range []struct {
			bytes int
			name  string
		}{{64 << 10, "64KB"}, {1 << 20, "1MB"}, {8 << 20, "8MB"}, {64 << 20, "64MB"}} {
			next := cycle(size.bytes / 4)
			b.ReportMetric(median(func() float64 { return chase(next) }), "mem-ns@"+size.name)
		}
		b.ReportMetric(median(copyRate), "copy-GB/s")
		b.ReportMetric(median(syscallNanos), "syscall-ns")
		f, err := os.Create(filepath.Join(b.TempDir(), "page"))
		if err != nil {
			b.Fatal(err)
		}
		page := make([]byte, 4096)
		for i := range 256 {
			if _, err := f.WriteAt(page, int64(i)*4096); err != nil {
				b.Fatal(err)
			}
		}
		io := func(op func([]byte, int64) (int, error), n int) func() float64 {
			return func() float64 {
				start := time.Now()
				for i := range n {
					if _, err := op(page, int64(i%256)*4096); err != nil {
						b.Fatal(err)
					}
				}
				return float64(time.Since(start).Nanoseconds()) / float64(n)
			}
		}
		b.ReportMetric(median(io(f.ReadAt, 20000)), "pread-ns")
		b.ReportMetric(median(io(f.WriteAt, 20000)), "pwrite-ns")
		b.ReportMetric(float64(FsyncMedian(b, 101).Microseconds()), "fsync-µs")
		f.Close()
		if steal1, total1, ok := stealTime(); ok && stealOK && total1 > total0 {
			b.ReportMetric(100*float64(steal1-steal0)/float64(total1-total0), "steal-%")
		}
	}
}

// arithmetic returns the microseconds a fixed run of multiplications and
// shifts takes, about a millisecond on a current core.
func arithmetic() float64 {
	start := time.Now()
	x := uint64(88172645463325252)
	for range 1 << 20 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	d := time.Since(start)
	sink += uint32(x)
	return float64(d.Nanoseconds()) / 1e3
}

// stealTime returns the steal and the total of the machine's CPU time so
// far, in clock ticks, from the first line of /proc/stat.
func stealTime() (steal, total uint64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i < 8 { // user to steal; guest time is within user already
			total += n
		}
		if i == 7 {
			steal = n
		}
	}
	return steal, total, true
}

// median runs f five times and returns the middle of its results.
func median(f func() float64) float64 {
	r := make([]float64, 5)
	for i := range r {
		r[i] = f()
	}
	slices.Sort(r)
	return r[2]
}

// cycle returns a random walk of n steps through n words: each word holds
// the index of the next, and the walk passes every word once.
func cycle(n int) []uint32 {
	next := make([]uint32, n)
	for i := range next {
		next[i] = uint32(i)
	}
	for i := n - 1; i > 0; i-- { // Sattolo's shuffle: one cycle through all
		j := rand.IntN(i)
		next[i], next[j] = next[j], next[i]
	}
	return next
}

// chase returns the nanoseconds a load takes on the walk next.
func chase(next []uint32) float64 {
	const loads = 1 << 20
	at := uint32(0)
	start := time.Now()
	for range loads {
		at = next[at]
	}
	d := time.Since(start)
	sink += at // keep the walk
	return float64(d.Nanoseconds()) / loads
}

var sink uint32

// copyRate returns the GB a second of copying 8 MB into another 8 MB.
func copyRate() float64 {
	src, dst := make([]byte, 8<<20), make([]byte, 8<<20)
	for i := range src {
		src[i] = byte(i)
	}
	const times = 16
	start := time.Now()
	for range times {
		copy(dst, src)
	}
	return float64(times*len(src)) / time.Since(start).Seconds() / 1e9
}

// syscallNanos returns the nanoseconds of one getppid.
func syscallNanos() float64 {
	const n = 100000
	start := time.Now()
	for range n {
		sink += uint32(os.Getppid())
	}
	return float64(time.Since(start).Nanoseconds()) / n
}
