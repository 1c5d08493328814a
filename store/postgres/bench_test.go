package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/postgres"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/store/storetest"
)

// The benchmarks run each measurement on SQLite and PostgreSQL side by
// side (sub-benchmarks sqlite and postgres), on the same synthetic data:
//
//	MNEME_TEST_POSTGRES=postgres://... go test -run '^$' -bench . ./store/postgres/

// backends are the stores compared.
var backends = []struct {
	name string
	open func(b *testing.B) store.Store
}{
	{"sqlite", func(b *testing.B) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}},
	{"postgres", func(b *testing.B) store.Store { return open(b) }},
}

// BenchmarkAppend: one message per Append, one durable transaction each.
func BenchmarkAppend(b *testing.B) {
	evs := storetest.Synthetic(1000)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Append(ctx, "acme", "bench", int64(i), evs[i%len(evs):i%len(evs)+1]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkAppendBatch: 100 messages per Append.
func BenchmarkAppendBatch(b *testing.B) {
	evs := storetest.Synthetic(100)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Append(ctx, "acme", "bench", int64(i*100), evs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkAppendParallel: one message per Append from 8 goroutines per
// CPU, each on a thread of its own: what many clients of one server (or
// many replicas) do. SQLite serialises its writers; PostgreSQL does not.
func BenchmarkAppendParallel(b *testing.B) {
	evs := storetest.Synthetic(1000)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b)
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				thread := fmt.Sprintf("t%d", next.Add(1))
				for i := int64(0); pb.Next(); i++ {
					if _, err := s.Append(ctx, "acme", thread, i, evs[i%1000:i%1000+1]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkLoadTail: read the last 200 events of a 10,000-event thread,
// what building a window reads when the engine's state is cold.
func BenchmarkLoadTail(b *testing.B) {
	evs := storetest.Synthetic(10000)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b)
			for i := 0; i < len(evs); i += 1000 {
				if _, err := s.Append(ctx, "acme", "long", int64(i), evs[i:i+1000]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				got, err := s.Load(ctx, "acme", "long", 9801, 0)
				if err != nil || len(got) != 200 {
					b.Fatalf("Load = %d events, %v", len(got), err)
				}
			}
			b.ReportMetric(float64(b.N*200)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkSearch: queries over a 10,000-message archive in 10 threads: a
// frequent word, two rare words, an identifier, an identifier with a word
// and a thread-filtered query.
func BenchmarkSearch(b *testing.B) {
	evs := storetest.Synthetic(10000)
	queries := []struct {
		name string
		q    store.SearchQuery
	}{
		{"frequent", store.SearchQuery{Text: storetest.Word(0)}},
		{"rare", store.SearchQuery{Text: storetest.Word(1801) + " " + storetest.Word(1302)}},
		{"identifier", store.SearchQuery{Text: "INV-0042"}},
		{"identifier+word", store.SearchQuery{Text: "invoice INV-0777"}},
		{"filtered", store.SearchQuery{Text: storetest.Word(5), Thread: "t3", Role: message.Assistant}},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b)
			for th := range 10 {
				if _, err := s.Append(ctx, "acme", fmt.Sprintf("t%d", th), 0, evs[th*1000:(th+1)*1000]); err != nil {
					b.Fatal(err)
				}
			}
			analyze(b, s)
			for _, c := range queries {
				b.Run(c.name, func(b *testing.B) {
					if hits, err := s.Search(ctx, "acme", c.q); err != nil || len(hits) == 0 {
						b.Fatalf("query %q finds %d, %v: the benchmark would measure nothing", c.q.Text, len(hits), err)
					}
					b.ResetTimer()
					for range b.N {
						if _, err := s.Search(ctx, "acme", c.q); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
				})
			}
		})
	}
}

// analyze refreshes PostgreSQL's planner statistics after a bulk load, as
// autovacuum does in production a little later: without them the planner
// guesses that a tenant has few rows and scans them instead of the index.
func analyze(b *testing.B, s store.Store) {
	if pg, ok := s.(interface{ Pool() *pgxpool.Pool }); ok {
		if _, err := pg.Pool().Exec(ctx, "ANALYZE"); err != nil {
			b.Fatal(err)
		}
	}
}

// appendBars are issue 19's durable-append bars in msgs/s, by backend and
// writers; PostgreSQL's lone writer has none (its rate is reported beside
// the others, with no "bar" to be read as a miss). BenchmarkDurableAppend
// and BenchmarkDurableFloor report their rates over them.
var appendBars = map[string]float64{"sqlite/1": 3000, "sqlite/32": 20000, "postgres/32": 10000}

// BenchmarkDurableAppend is issue 19's figure: durable single-message
// appends from one writer and from 32 concurrent threads (one goroutine
// each, as 32 clients of one server or of several replicas), on SQLite
// (WAL, synchronous=FULL) and PostgreSQL side by side, with the disk's
// fsync rate measured in the same run as the floor a lone writer cannot
// beat. "bar" is msgs/s over the target (≥ 1 meets it):
//
//	MNEME_TEST_POSTGRES=postgres://... go test -run '^$' -bench DurableAppend -count 3 ./store/postgres/
//
// Each thread appends the workload, an agent transcript
// (storetest.AgentThread: tool calls, each answered in the next append by
// a 1-4 KB result that names no tool, so the store finds the call's), one
// message per call. Until 2026-12-04 this benchmark appended
// storetest.Synthetic's 30-80-word texts, a quarter of the bytes and no
// tool results: the figures in the README before that date are of those.
func BenchmarkDurableAppend(b *testing.B) {
	evs := storetest.AgentThread(1000)
	for i := range evs {
		// A token count as the engine gives one (about four bytes a token).
		evs[i].Tokens = len(evs[i].Message.PlainText()) / 4
	}
	b.Run("fsync", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "fsync"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		page := make([]byte, 4096)
		b.ResetTimer()
		for i := range b.N {
			if _, err := f.WriteAt(page, int64(i%256)*4096); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fsyncs/s")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/fsync")
	})
	// The same with as many WAL frames as a commit writes (a 24-byte
	// header and a 4,096-byte page each, one write apiece, as SQLite
	// writes them) before the fsync: what a commit's size costs on this
	// disk beyond the one page the bars' fsync-µs measures (a lone
	// append writes about 5 frames, the proxy's steady request 6-14, a
	// 32-thread group about 40).
	for _, frames := range []int{1, 5, 14, 40} {
		b.Run(fmt.Sprintf("fsync/frames=%d", frames), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "wal"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			const frame = 24 + 4096
			const size = 4000 * frame // about SQLite's WAL bound (walBackstop)
			if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			page := make([]byte, 4096)
			off := int64(0)
			b.ResetTimer()
			for range b.N {
				if off+int64(frames*frame) > size {
					off = 0 // overwrite from the start, as a WAL that restarts
				}
				for range frames {
					if _, err := f.WriteAt(page[:24], off); err != nil {
						b.Fatal(err)
					}
					if _, err := f.WriteAt(page, off+24); err != nil {
						b.Fatal(err)
					}
					off += frame
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/commit")
		})
	}
	for _, be := range backends {
		for _, writers := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/%d", be.name, writers), func(b *testing.B) {
				s := be.open(b)
				grouped, _ := s.(interface{ GroupStats() backend.GroupStats })
				var g0 backend.GroupStats
				if grouped != nil {
					g0 = grouped.GroupStats()
				}
				srv0, local := serverCPU(b, s)
				var next atomic.Int64
				var wg sync.WaitGroup
				lat := make([]time.Duration, b.N) // each append's latency, by its number
				b.ResetTimer()
				cpu0 := storetest.CPUTime()
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						thread := fmt.Sprintf("t%d", w)
						for seq := int64(0); ; seq++ {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							start := time.Now()
							if _, err := s.Append(ctx, "acme", thread, seq, evs[seq%1000:seq%1000+1]); err != nil {
								b.Error(err)
								return
							}
							lat[i-1] = time.Since(start)
						}
					}()
				}
				wg.Wait()
				rate := float64(b.N) / b.Elapsed().Seconds()
				cpu := storetest.CPUTime() - cpu0
				b.StopTimer()
				if local {
					// The server's share, when it runs on this machine: on
					// PostgreSQL the client's CPU is half the story.
					srv1, _ := serverCPU(b, s)
					var d time.Duration
					for pid, t := range srv1 {
						d += t - srv0[pid] // a backend born during the run counts from 0
					}
					b.ReportMetric(float64(d.Microseconds())/float64(b.N), "server-cpu-µs/msg")
					// And with the work the run left to do: the GIN
					// index's pending list, merged now, whose merge the
					// appends' rate did not pay (a longer pending list
					// defers more of it).
					s.(*postgres.Store).WaitGINClean()
					if _, err := s.(*postgres.Store).Pool().Exec(ctx, `SELECT gin_clean_pending_list('events_tsv'::regclass)`); err != nil {
						b.Fatal(err)
					}
					srv2, _ := serverCPU(b, s)
					d = 0
					for pid, t := range srv2 {
						d += t - srv0[pid]
					}
					b.ReportMetric(float64(d.Microseconds())/float64(b.N), "drained-server-cpu-µs/msg")
				}
				// The disk's fsync in the same run, right after: on a
				// shared machine it moves from minute to minute, and a lone
				// writer cannot beat it (msgs/fsync ≤ 1 means each append
				// waited for its own).
				fs := storetest.FsyncMedian(b, 200)
				b.ReportMetric(rate, "msgs/s")
				if bar, ok := appendBars[fmt.Sprintf("%s/%d", be.name, writers)]; ok {
					b.ReportMetric(rate/bar, "bar")
				}
				b.ReportMetric(float64(fs.Microseconds()), "fsync-µs")
				b.ReportMetric(rate*fs.Seconds(), "msgs/fsync")
				// Appends per commit as counted: each group is one
				// transaction, one WAL flush.
				if grouped != nil {
					g := grouped.GroupStats()
					if n := g.Groups - g0.Groups; n > 0 {
						b.ReportMetric(float64(g.Requests-g0.Requests)/float64(n), "msgs/commit")
					}
					// The commits' wall time per message: on SQLite (one
					// writer) the serial part, 1e6 / it the rate no number
					// of cores can pass.
					b.ReportMetric(float64((g.Busy-g0.Busy).Microseconds())/float64(b.N), "commit-µs/msg")
				}
				// This process's CPU per message (SQLite's whole work; on
				// PostgreSQL the client's only): what bounds the rate once
				// fsyncs are shared, and what a loaded machine moves least.
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
				// An append's latency: the tail shows the commits that also
				// did periodic work (SQLite moving its index queue, a
				// checkpoint).
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

// BenchmarkAppendGroup commits groups of 32 one-message appends (each to a
// thread of its own, as BenchmarkDurableAppend's 32 writers form them)
// one group after another from one goroutine: the group statement's cost
// without the scheduling of 32 goroutines, for comparing statements and
// encodings. server-cpu-µs/msg is the backends' CPU (the GIN cleaner's
// included), cpu-µs/msg this process's.
func BenchmarkAppendGroup(b *testing.B) {
	const threads = 32
	evs := storetest.Synthetic(1000)
	s := open(b)
	reqs := make([]postgres.GroupRequest, threads)
	for i := range reqs {
		reqs[i].Thread = fmt.Sprintf("t%d", i)
		reqs[i].Tenant = "acme"
	}
	group := func(seq int64) {
		for i := range reqs {
			reqs[i].After = seq
			reqs[i].Events = evs[(int(seq)*threads+i)%len(evs):][:1]
		}
		for i, err := range s.AppendGroup(reqs) {
			if err != nil {
				b.Fatalf("request %d: %v", i, err)
			}
		}
	}
	group(0) // the threads exist: every group takes the moving statement
	srv0, local := serverCPU(b, s)
	b.ResetTimer()
	cpu0 := storetest.CPUTime()
	groups := int64(b.N+threads-1) / threads
	for seq := int64(1); seq <= groups; seq++ {
		group(seq)
	}
	msgs := float64(groups * threads)
	b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64((storetest.CPUTime()-cpu0).Microseconds())/msgs, "cpu-µs/msg")
	b.StopTimer()
	if local {
		srv1, _ := serverCPU(b, s)
		var d time.Duration
		for pid, t := range srv1 {
			d += t - srv0[pid]
		}
		b.ReportMetric(float64(d.Microseconds())/msgs, "server-cpu-µs/msg")
	}
}

// serverCPU returns the CPU time used so far by each PostgreSQL backend
// serving s's database, read from /proc: local is false unless s is on
// PostgreSQL and the server runs on this machine (Linux).
func serverCPU(b *testing.B, s store.Store) (cpu map[int]time.Duration, local bool) {
	pg, ok := s.(interface{ Pool() *pgxpool.Pool })
	if !ok {
		return nil, false
	}
	rows, err := pg.Pool().Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	cpu = map[int]time.Duration{}
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil, false // not a process of this machine
		}
		// Fields after the command's closing parenthesis: utime and stime
		// are the 12th and 13th, in clock ticks (100 a second on Linux).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 13 {
			return nil, false
		}
		var ut, st int64
		fmt.Sscan(f[11], &ut)
		fmt.Sscan(f[12], &st)
		cpu[int(pid)] = time.Duration(ut+st) * 10 * time.Millisecond
	}
	return cpu, true
}
