package sqlite_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/store/storetest"
)

func benchOpen(b *testing.B) *sqlite.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkAppend: one message per Append (one durable transaction each).
func BenchmarkAppend(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := storetest.Synthetic(1000)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Append(ctx, "acme", "bench", int64(i), evs[i%len(evs):i%len(evs)+1]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkAppendBatch: 100 messages per Append.
func BenchmarkAppendBatch(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := storetest.Synthetic(100)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Append(ctx, "acme", "bench", int64(i*100), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSearch: queries over a 10,000-message archive in 10 threads,
// cycling through a frequent word, two rare words, an identifier and a
// thread-filtered query.
func BenchmarkSearch(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := storetest.Synthetic(10000)
	for th := range 10 {
		if _, err := s.Append(ctx, "acme", fmt.Sprintf("t%d", th), 0, evs[th*1000:(th+1)*1000]); err != nil {
			b.Fatal(err)
		}
	}
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
	for _, c := range queries {
		b.Run(c.name, func(b *testing.B) {
			hits, err := s.Search(ctx, "acme", c.q)
			if err != nil {
				b.Fatal(err)
			}
			if len(hits) == 0 {
				b.Fatalf("query %q finds nothing: the benchmark would measure nothing", c.q.Text)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := s.Search(ctx, "acme", c.q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
		})
	}
}

// BenchmarkLoadShort: a Load of a thread's last two events, as the engine
// reads what follows its snapshot at every request: the statement's cost,
// more than the rows'.
func BenchmarkLoadShort(b *testing.B) {
	s := benchOpen(b)
	ctx := context.Background()
	evs := storetest.Synthetic(1000)
	if _, err := s.Append(ctx, "acme", "bench", 0, evs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if got, err := s.Load(ctx, "acme", "bench", 999, 0); err != nil || len(got) != 2 {
			b.Fatalf("Load = %d events, %v", len(got), err)
		}
	}
}

// BenchmarkOpen: opening an existing file at this build's schema version,
// the first step of a cold start.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	for b.Loop() {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkWALFrames counts the WAL frames (pages written, each with its
// checksum and two system calls) that durable appends of the synthetic
// messages write: per commit for a lone writer, per message for 32 threads
// appending at once (as BenchmarkDurableAppend/sqlite/32 forms groups).
// Unlike the rates, the counts do not move with the machine's load: what a
// schema change does to the writer's work, measured exactly. The counts
// come from the WAL index's header (mxFrame); a round in which the WAL
// started over is left out.
//
//	go test -run '^$' -bench WALFrames -benchtime 20x ./store/sqlite/
func BenchmarkWALFrames(b *testing.B) {
	ctx := context.Background()
	evs := storetest.Synthetic(1000)
	path := filepath.Join(b.TempDir(), "frames.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	mxFrame := func() uint32 {
		h, err := os.ReadFile(path + "-shm")
		if err != nil || len(h) < 20 {
			b.Fatalf("the WAL index: %v", err)
		}
		return binary.LittleEndian.Uint32(h[16:])
	}
	const threads = 32
	last := make([]int64, threads)
	appendTo := func(th int) {
		if _, err := s.Append(ctx, "acme", fmt.Sprint("t", th), last[th], evs[int(last[th])%len(evs):][:1]); err != nil {
			b.Error(err)
		}
		last[th]++
	}
	for range 100 { // threads with a history: their index leaves are full-grown
		for th := range threads {
			appendTo(th)
		}
	}
	var lone, loneCommits, group, groupMsgs, groups uint32
	for b.Loop() {
		f0, g0 := mxFrame(), s.GroupStats()
		for range 10 {
			appendTo(0)
		}
		f1, g1 := mxFrame(), s.GroupStats()
		if f1 > f0 {
			lone += f1 - f0
			loneCommits += uint32(g1.Groups - g0.Groups)
		}
		var wg sync.WaitGroup
		for th := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				appendTo(th)
			}()
		}
		wg.Wait()
		f2, g2 := mxFrame(), s.GroupStats()
		if f2 > f1 {
			group += f2 - f1
			groupMsgs += uint32(g2.Requests - g1.Requests)
			groups += uint32(g2.Groups - g1.Groups)
		}
	}
	if loneCommits > 0 {
		b.ReportMetric(float64(lone)/float64(loneCommits), "frames/lone-commit")
	}
	if groupMsgs > 0 {
		b.ReportMetric(float64(group)/float64(groupMsgs), "frames/msg@32")
		b.ReportMetric(float64(groupMsgs)/float64(groups), "msgs/commit@32")
	}
}
