package mneme_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/storetest"
)

// BenchmarkAutoRecall: what auto-recall adds to a request on a long agent
// thread (2,000 messages of tool calls with 1–4 KB results, in the memory
// store): two threads take turns request by request, one with auto-recall
// on (the default), one with it off, and the CPU per request of each is
// reported with their difference, the recall's own cost.
//
//	go test -run '^$' -bench AutoRecall -benchtime 200x .
func BenchmarkAutoRecall(b *testing.B) {
	ctx := context.Background()
	st := inmem.New()
	defer st.Close()
	off := mneme.DefaultPolicy()
	off.AutoRecall = false
	var threads [2]*mneme.Thread
	for k, p := range []*mneme.Policy{nil, &off} {
		m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: p})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		id := fmt.Sprintf("t%d", k)
		fillAgent(b, st, id, 2000)
		threads[k] = m.Thread("default", id)
		if _, err := threads[k].Window(ctx, mneme.WindowOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var cpu [2]time.Duration
	recalled := 0
	b.ResetTimer()
	for i := range b.N {
		f := (i * 37) % 900
		for k, th := range threads {
			cpu0 := storetest.CPUTime()
			_, w, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.User, fmt.Sprintf("Look again at src/f%d.go: does F%d still return nil?", f, f%1000))}, mneme.WindowOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.Assistant, "It does.")}, mneme.WindowOptions{}); err != nil {
				b.Fatal(err)
			}
			cpu[k] += storetest.CPUTime() - cpu0
			if k == 0 && w.Usage.RecallBlock != nil && len(w.Usage.RecallBlock.Hits) > 0 {
				recalled++
			}
		}
	}
	b.StopTimer()
	if recalled == 0 {
		b.Fatal("no request recalled anything: the benchmark measures nothing")
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(us(cpu[0]), "cpu-µs/request")
	b.ReportMetric(us(cpu[1]), "cpu-µs/request-off")
	b.ReportMetric(us(cpu[0]-cpu[1]), "cpu-µs/recall")
	b.ReportMetric(float64(recalled)/float64(b.N), "recalled/request")
}
