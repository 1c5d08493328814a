package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store"
)

// BenchmarkResendStoreCalls counts the log calls of a steady-state resend
// request (a conversation that goes on: the log holds the history, the
// request adds one user message) through a counting store, and times the
// proxy side by side with direct calls to the same upstream.
//
//	go test ./server/ -run '^$' -bench ResendStoreCalls -benchtime 300x
func BenchmarkResendStoreCalls(b *testing.B) {
	for _, backend := range []string{"memory", "sqlite"} {
		b.Run(backend, func(b *testing.B) {
			var cs *countingStore
			r := startRig(b, rigOpts{backend: backend, budget: 64000, wrap: func(st store.Store) store.Store {
				cs = newCountingStore(st)
				return cs
			}})
			direct, proxied := r.llm.URL()+"/v1/chat/completions", r.url+"/v1/chat/completions"
			conv := conversation{}
			body := conv.next()
			rb, _, err := do(proxied, conv.thread, body) // the thread's first request
			if err != nil {
				b.Fatal(err)
			}
			if err := conv.reply(rb); err != nil {
				b.Fatal(err)
			}
			cs.take()
			var dd, dp []time.Duration
			loads, appends := 0, 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				conv.turn = 1 // stay in one conversation: every request is a steady-state resend
				body := conv.next()
				if _, d, err := do(direct, "", body); err != nil {
					b.Fatal(err)
				} else {
					dd = append(dd, d)
				}
				cs.take()
				rb, d, err := do(proxied, conv.thread, body)
				if err != nil {
					b.Fatal(err)
				}
				dp = append(dp, d)
				for _, c := range strings.Fields(cs.take()) {
					op, n := splitCount(c)
					switch {
					case strings.HasPrefix(op, "load"):
						loads += n
					case strings.HasPrefix(op, "append"):
						appends += n
					}
				}
				if err := conv.reply(rb); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(loads)/float64(b.N), "loads/req")
			b.ReportMetric(float64(appends)/float64(b.N), "appends/req")
			d50, p50 := percentile(dd, 0.5), percentile(dp, 0.5)
			b.ReportMetric(d50, "direct-p50-µs")
			b.ReportMetric(p50, "mneme-p50-µs")
			b.ReportMetric(p50-d50, "overhead-p50-µs")
		})
	}
}

// splitCount reads one "op:outcome×n" line of countingStore.take.
func splitCount(s string) (string, int) {
	op, n, _ := strings.Cut(s, "×")
	k := 0
	for _, c := range n {
		k = k*10 + int(c-'0')
	}
	return op, k
}
