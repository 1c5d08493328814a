package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store/storetest"
)

// BenchmarkIndexMove measures the archive index's writer alone, by the
// process's CPU per message moved (move-cpu-µs/msg): the messages of an
// agent transcript (storetest.AgentThread, issue 19's workload: tool calls
// and 1-4 KB results; until 2026-12-04 storetest.Synthetic's 30-80-word
// texts) from 32 threads are appended with no move under way (untimed), and
// each batch of them is then moved into the index as the store moves its
// queue (catchUpIndex). Batches of indexBatch are what the store moves;
// four times that runs beside it. b.N is the number of messages.
//
// FTS5 writes each batch as a segment, a header and a doclist for every
// term it holds, and merges segments again later: a batch's cost grows
// more slowly than its messages. With 32 threads appending, holding the
// moves back raised BenchmarkDurableAppend's rate (store/postgres) by a
// quarter to a third when this was written; this measures the moves
// without the appends' noise.
func BenchmarkIndexMove(b *testing.B) {
	for _, batch := range []int64{indexBatch, 4 * indexBatch} {
		b.Run(fmt.Sprint(batch), func(b *testing.B) {
			defer func(n int64) { indexBatch = n }(indexBatch)
			indexBatch = 1 << 40 // no move but the benchmark's
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "move.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			evs := storetest.AgentThread(4096)
			const threads = 32
			last := make([]int64, threads)
			var cpu time.Duration
			for i := 0; i < b.N; {
				n := min(int(batch), b.N-i)
				for j := range n {
					th := (i + j) % threads
					if _, err := s.Append(ctx, "acme", fmt.Sprint("t", th), last[th], evs[(i+j)%len(evs):][:1]); err != nil {
						b.Fatal(err)
					}
					last[th]++
				}
				i += n
				s.ckRun.Wait() // the log's background checkpoint is not the move's
				c0 := storetest.CPUTime()
				if err := s.catchUpIndex(ctx); err != nil {
					b.Fatal(err)
				}
				cpu += storetest.CPUTime() - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "move-cpu-µs/msg")
		})
	}
}
