package mneme_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/store/storetest"
	"github.com/mnemehq/mneme/token"
)

// BenchmarkWindowAfterAppend: the cost of Window after one new message, on
// a 100-message and on a 10,000-message thread of the agent
// transcript (storetest.AgentThread, 1-4 KB tool results; until
// 2026-12-04 its results were 200 bytes), side by side (SQLite). The
// ratio must stay under 1.5 (issue 19): a call costs O(new messages), not
// O(thread). The two threads take turns, call by call, so that a shared
// machine's load moves both alike; the process's CPU per window is
// reported beside the wall time (cpu-ratio), the figure load moves least.
func BenchmarkWindowAfterAppend(b *testing.B) {
	dir := b.TempDir()
	m := openSQLite(b, filepath.Join(dir, "b.db"), nil)
	fillAgent(b, m.Store(), "small", 100)
	fillAgent(b, m.Store(), "large", 10000)
	ctx := context.Background()
	threads := [2]*mneme.Thread{m.Thread("default", "small"), m.Thread("default", "large")}
	for _, th := range threads {
		if _, err := th.Window(ctx, mneme.WindowOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var wall, cpu [2]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, th := range threads {
			id := fmt.Sprintf("x%d", i)
			if _, err := th.Append(ctx, message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep", Arguments: "{}"})); err != nil {
				b.Fatal(err)
			}
			start, cpu0 := time.Now(), storetest.CPUTime()
			if _, err := th.Window(ctx, mneme.WindowOptions{}); err != nil {
				b.Fatal(err)
			}
			wall[k] += time.Since(start)
			cpu[k] += storetest.CPUTime() - cpu0
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(wall[0].Microseconds())/float64(b.N), "µs/window@100")
	b.ReportMetric(float64(wall[1].Microseconds())/float64(b.N), "µs/window@10k")
	b.ReportMetric(float64(wall[1])/float64(wall[0]), "ratio")
	b.ReportMetric(float64(cpu[0].Microseconds())/float64(b.N), "cpu-µs/window@100")
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(b.N), "cpu-µs/window@10k")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-ratio")
}

// fillAgent writes n messages of storetest.AgentThread straight to the
// store, with their token counts as the engine's Append records them.
func fillAgent(b testing.TB, st store.Store, thread string, n int) {
	ctx := context.Background()
	c, err := token.Get(token.O200kBase)
	if err != nil {
		b.Fatal(err)
	}
	evs := storetest.AgentThread(n)
	for i := range evs {
		evs[i].At, evs[i].Tokens = time.Now(), token.MessageTokens(c, *evs[i].Message)
	}
	for i := 0; i < len(evs); i += 1000 {
		if _, err := st.Append(ctx, "default", thread, int64(i), evs[i:min(i+1000, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdStart is issue 19's cold-start figure: the first window of
// a 10,000- and a 100,000-message thread after a restart (a new store
// handle and Manager on the SQLite file), read from the window snapshot and
// the events after it ("snapshot") and, side by side in the same run, by
// replaying the log alone ("log"). The bar is 20 ms at 10k and 30 ms at
// 100k; "flat" is the 100k/10k ratio of the snapshot path (see the two
// sub-benchmarks' ms/snapshot).
//
//	go test -run '^$' -bench ColdStart -benchtime 3x .
func BenchmarkColdStart(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			ctx := context.Background()
			path := filepath.Join(b.TempDir(), "b.db")
			st, err := sqlite.Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			fillAgent(b, st, "t", n)
			// The first window compacts the thread once and snapshots it, as
			// a thread that grew through the engine would have been.
			m, err := mneme.Open(ctx, mneme.Config{Store: st})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.Thread("default", "t").Window(ctx, mneme.WindowOptions{}); err != nil {
				b.Fatal(err)
			}
			m.Close()
			if _, _, err := st.GetSnapshot(ctx, "default", "t"); err != nil {
				b.Fatalf("no snapshot: %v", err)
			}
			st.Close()
			var cpuSnap time.Duration
			first := func(logOnly bool) time.Duration {
				start, cpu0 := time.Now(), storetest.CPUTime()
				st, err := sqlite.Open(ctx, path)
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				var s store.Store = st
				if logOnly {
					s = hideOptional{st}
				}
				m, err := mneme.Open(ctx, mneme.Config{Store: s})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				if _, err := m.Thread("default", "t").Window(ctx, mneme.WindowOptions{}); err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				if !logOnly {
					cpuSnap += storetest.CPUTime() - cpu0
				}
				return d
			}
			var snap, replay time.Duration
			b.ResetTimer()
			for range b.N {
				snap += first(false)
				replay += first(true)
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N) }
			b.ReportMetric(ms(snap), "ms/snapshot")
			// The process's CPU for it: what a loaded machine moves least.
			b.ReportMetric(ms(cpuSnap), "cpu-ms/snapshot")
			b.ReportMetric(ms(replay), "ms/log")
			b.ReportMetric(float64(replay)/float64(snap), "speedup")
		})
	}
}

// hideOptional hides the optional interfaces of the store it wraps (no
// Unwrap): a Manager over it replays the log alone.
type hideOptional struct{ store.Store }
