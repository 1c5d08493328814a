package server_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/storetest"
)

// The proxy's overhead, side by side with direct calls to the same fake
// upstream. The workload is an agent's: each conversation has a
// tool-heavy history and goes on for cycleTurns turns, the client
// resending its whole history every time; the first request of each cycle
// is a new thread whose whole history is appended. Direct and proxied
// requests carry the same bodies.
//
//	go test ./server/ -run '^$' -bench Proxy -benchtime 2000x

const cycleTurns = 10

// conversation is one client's resend history.
type conversation struct {
	msgs   []map[string]any
	thread string
	turn   int
	base   int // messages of the history a cycle starts with (default 48)
	turns  int // requests per cycle (default cycleTurns)
}

func baseHistory() []map[string]any { return baseHistoryOf(48, 0) }

// baseHistoryOf is a tool-heavy history of n messages (n even). A salt
// other than 0 makes every message's content its own (a new client's
// history, which no cache has seen); 0 repeats the tool outputs every 20
// calls.
func baseHistoryOf(n int, salt int64) []map[string]any {
	h := []map[string]any{
		{"role": "system", "content": "You are a coding agent working in a Go repository."},
		{"role": "user", "content": "Fix ticket INV-4401 in src/shop/checkout.go."},
	}
	if salt != 0 {
		h[1]["content"] = fmt.Sprintf("Fix ticket INV-%d in src/shop/checkout.go.", salt)
	}
	for i := 0; len(h) < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		tool := []string{"read_file", "grep", "run_tests"}[i%3]
		out := toolOutput(tool, i%20)
		if salt != 0 {
			out = fmt.Sprintf("# run %d, call %d\n%s", salt, i, out)
		}
		h = append(h,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": tool, "arguments": fmt.Sprintf(`{"arg":"x%d"}`, i)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": out},
		)
	}
	return h
}

var cycleSeq atomic.Int64

// starts reports whether the next request begins a new cycle (and thread).
func (c *conversation) starts() bool { return c.turn%cmp.Or(c.turns, cycleTurns) == 0 }

// next returns the body of the conversation's next request, starting a
// new cycle (and thread) every c.turns turns.
func (c *conversation) next() []byte {
	if c.starts() {
		c.msgs = append(baseHistoryOf(cmp.Or(c.base, 48), 0), map[string]any{"role": "user", "content": "Go on."})
		c.thread = fmt.Sprintf("bench-%d", cycleSeq.Add(1))
	}
	c.turn++
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": c.msgs})
	return b
}

// reply records the answer the client got and adds a new user message.
func (c *conversation) reply(body []byte) error {
	var cc struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &cc); err != nil || len(cc.Choices) == 0 {
		return fmt.Errorf("bad reply %q: %v", body, err)
	}
	c.msgs = append(c.msgs,
		map[string]any{"role": "assistant", "content": cc.Choices[0].Message.Content},
		map[string]any{"role": "user", "content": fmt.Sprintf("Next, turn %d.", c.turn)})
	return nil
}

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

func do(url, thread string, body []byte) ([]byte, time.Duration, error) {
	b, d, _, err := doH(url, thread, body)
	return b, d, err
}

// doH is do returning the response's headers too.
func doH(url, thread string, body []byte) ([]byte, time.Duration, http.Header, error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if thread != "" {
		req.Header.Set(proxy.HeaderThread, thread)
	}
	start := time.Now()
	resp, err := benchClient.Do(req)
	if err != nil {
		return nil, 0, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return b, d, resp.Header, err
}

func percentile(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds())
}

func benchStores(b *testing.B) []struct{ name, dsn string } {
	return []struct{ name, dsn string }{
		{"memory", ""},
		{"sqlite", "sqlite:" + filepath.Join(b.TempDir(), "bench.db")},
	}
}

// latencyRow is one row of BenchmarkProxyLatency.
type latencyRow struct {
	name string
	base int  // the history a conversation starts with
	cold bool // every timed request is a new thread's first
}

// BenchmarkProxyLatency alternates one direct and one proxied request of
// the same body, one client, and reports both latencies' p50 and p99, the
// overhead at p50 and the ratios. On SQLite it also times one write+fsync
// of a page next to the database after each request, reports its p50 and
// p99 (the disk's own tail, below which no append's p99 can be) and the
// overhead beyond one fsync: the proxy's bar is p50 ≤ 1 ms over direct on
// memory, ≤ 1 ms plus one fsync on SQLite, p99 ≤ 5 ms.
//
// The rows "58" and "500" are a resend client's requests of about 58 and
// 500 messages (49 to 67, 491 to 509) to a thread that exists: a
// conversation's first request (47 or 489 messages, standing in for the
// turns that built the history, each of which would have appended two
// messages) goes through the proxy untimed, then ten turns are timed. The
// rows "58-new-thread" and "500-new-thread" are the worst case: the same
// sizes of body, each the first request of a new thread whose history no
// cache has seen (a client that meets the proxy mid-conversation), so the
// whole history is appended, counted and indexed within the request.
//
// The tail is taken apart by what each proxied request did: the first
// request of a thread, a compaction or other step of the window
// (X-Mneme-Compacted), a garbage collection that ended during the
// request, or none of these (steady): each class's p50 and p99 overhead
// over the direct request of the same body, its share of requests, and
// the CPU the proxy added to it. Beside the wall figures, which a shared
// machine moves, the CPU and the heap allocations the proxy adds per
// request (overhead-cpu-µs/req, overhead-allocs/req, overhead-KB/req: the
// proxied request's less the direct one's, both measured in this
// process, which runs the client and the fake upstream too).
func BenchmarkProxyLatency(b *testing.B) {
	rows := []latencyRow{{"58", 46, false}, {"58-new-thread", 46, true}, {"500", 488, false}, {"500-new-thread", 488, true}}
	for _, st := range benchStores(b) {
		for _, row := range rows {
			b.Run(st.name+"/"+row.name, func(b *testing.B) {
				probe := &probeStore{}
				h := startServer(b, harnessOpts{budget: 64000, dsn: st.dsn, wrap: func(s store.Store) store.Store { probe.Store = s; return probe }})
				direct, proxied := h.llm.URL()+"/v1/chat/completions", h.url+"/v1/chat/completions"
				var fsync *os.File
				var wal *walProbe
				defer func() { wal.close() }()
				var trs []reqTrace
				if st.dsn != "" {
					wal = &walProbe{path: strings.TrimPrefix(st.dsn, "sqlite:") + "-shm"}
					f, err := os.Create(filepath.Join(filepath.Dir(strings.TrimPrefix(st.dsn, "sqlite:")), "fsync-probe"))
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					fsync = f
				}
				var dd, dp, df []time.Duration
				conv := conversation{base: row.base, turns: cycleTurns + 1}
				msgs := 0
				page := make([]byte, 4096)
				classes := map[string][]time.Duration{} // overhead by what the request did
				cost := map[string]*reqCost{}           // the CPU and allocations of that overhead
				var ms0, ms runtime.MemStats
				var directKB float64 // what the direct calls allocated: the fake upstream's and the client's garbage
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var body []byte
					var thread string
					if row.cold {
						body, thread = coldRequest(row.base, 1+i%cycleTurns)
					} else {
						if conv.starts() {
							// The conversation so far, untimed (see above).
							b.StopTimer()
							body := conv.next()
							rb, _, err := do(proxied, conv.thread, body)
							if err == nil {
								err = conv.reply(rb)
							}
							if err != nil {
								b.Fatal(err)
							}
							b.StartTimer()
						}
						body, thread = conv.next(), conv.thread
					}
					msgs += bodyMessages(b, body)
					runtime.ReadMemStats(&ms0)
					c0 := storetest.CPUTime()
					_, d0, err := do(direct, "", body)
					if err != nil {
						b.Fatal(err)
					}
					c1 := storetest.CPUTime()
					dd = append(dd, d0)
					runtime.ReadMemStats(&ms)
					gcs, mallocs, bytes := ms.NumGC, ms.Mallocs, ms.TotalAlloc
					dm, db := mallocs-ms0.Mallocs, bytes-ms0.TotalAlloc
					directKB += float64(db) / 1024
					pc0 := probe.counts()
					bf0, mx0 := wal.read()
					c2 := storetest.CPUTime()
					probe.timed.Store(true)
					rb, d, hdr, err := doH(proxied, thread, body)
					probe.timed.Store(false)
					if err != nil {
						b.Fatal(err)
					}
					c3 := storetest.CPUTime()
					pc1 := probe.counts()
					bf1, mx1 := wal.read()
					dp = append(dp, d)
					runtime.ReadMemStats(&ms)
					class := "steady"
					switch {
					case row.cold:
						class = "first"
					case hdr.Get(proxy.HeaderCompacted) == "true":
						class = "compacted"
					case ms.NumGC != gcs:
						class = "gc"
					}
					classes[class] = append(classes[class], d-d0)
					tr := reqTrace{over: d - d0, cpu: c3 - c2 - (c1 - c0), class: class,
						appends: pc1.appends - pc0.appends, searches: pc1.searches - pc0.searches,
						appendD: time.Duration(pc1.appendNs - pc0.appendNs), searchD: time.Duration(pc1.searchNs - pc0.searchNs),
						ckpt: bf1 > bf0 || (mx1 < mx0 && bf0 < mx0), turn: conv.turn % (cycleTurns + 1), gcs: [2]uint32{gcs, ms.NumGC}, kinds: probe.takeKinds()}
					if mx1 >= mx0 {
						tr.frames = mx1 - mx0
					}
					trs = append(trs, tr)
					for _, c := range []string{class, "all"} {
						if cost[c] == nil {
							cost[c] = &reqCost{}
						}
						cost[c].add(c3-c2-(c1-c0), float64(ms.Mallocs-mallocs)-float64(dm), float64(ms.TotalAlloc-bytes)-float64(db))
					}
					if !row.cold {
						if err := conv.reply(rb); err != nil {
							b.Fatal(err)
						}
					}
					if fsync != nil {
						start := time.Now()
						if _, err := fsync.WriteAt(page, 0); err != nil {
							b.Fatal(err)
						}
						if err := fsync.Sync(); err != nil {
							b.Fatal(err)
						}
						df = append(df, time.Since(start))
					}
				}
				b.StopTimer()
				d50, p50 := percentile(dd, 0.5), percentile(dp, 0.5)
				d99, p99 := percentile(dd, 0.99), percentile(dp, 0.99)
				b.ReportMetric(d50, "direct-p50-µs")
				b.ReportMetric(p50, "mneme-p50-µs")
				b.ReportMetric(d99, "direct-p99-µs")
				b.ReportMetric(p99, "mneme-p99-µs")
				b.ReportMetric(p50-d50, "overhead-p50-µs")
				b.ReportMetric(p99-d99, "overhead-p99-µs")
				b.ReportMetric(p50/d50, "p50-ratio")
				b.ReportMetric(p99/d99, "p99-ratio")
				b.ReportMetric(float64(msgs)/float64(b.N), "msgs/req")
				for _, c := range []string{"steady", "first", "compacted", "gc"} {
					if ds := classes[c]; len(ds) > 0 {
						b.ReportMetric(percentile(ds, 0.5), c+"-overhead-p50-µs")
						b.ReportMetric(percentile(ds, 0.99), c+"-overhead-p99-µs")
						b.ReportMetric(float64(len(ds))/float64(b.N), c+"-share")
						b.ReportMetric(cost[c].cpuMicros(), c+"-cpu-µs/req")
					}
				}
				all := cost["all"]
				b.ReportMetric(all.cpuMicros(), "overhead-cpu-µs/req")
				b.ReportMetric(all.allocs/float64(all.n), "overhead-allocs/req")
				b.ReportMetric(all.bytes/float64(all.n)/1024, "overhead-KB/req")
				// The same process runs the client and the fake upstream: the
				// collections that land in requests are paced by their
				// garbage too (direct-KB/req for one direct call, twice that
				// an iteration), which a proxy in front of a real API does
				// not carry.
				b.ReportMetric(directKB/float64(b.N), "direct-KB/req")
				var f50d time.Duration
				if len(df) > 0 {
					f50d = time.Duration(percentile(df, 0.5)) * time.Microsecond
				}
				reportTail(b, trs, f50d, wal != nil)
				probe.mu.Lock()
				b.Logf("events the timed requests appended: %v, %d KB of text and data", probe.kinds, probe.bytes>>10)
				probe.mu.Unlock()
				if len(df) > 0 {
					f50 := percentile(df, 0.5)
					b.ReportMetric(f50, "fsync-p50-µs")
					// The disk's own tail: an append waits for an fsync, so
					// the SQLite rows' p99 cannot be below this.
					b.ReportMetric(percentile(df, 0.99), "fsync-p99-µs")
					b.ReportMetric(p50-d50-f50, "overhead-beyond-fsync-p50-µs")
				}
			})
		}
	}
}

// coldRequest returns the body of a new thread's first request, and the
// thread's id: a history of base messages no cache has seen, "Go on." and
// turns answered turns after it (base+1+2*turns messages).
func coldRequest(base, turns int) ([]byte, string) {
	seq := cycleSeq.Add(1)
	msgs := append(baseHistoryOf(base, seq), map[string]any{"role": "user", "content": "Go on."})
	for t := 1; t <= turns; t++ {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": fmt.Sprintf("Done with step %d of run %d.", t, seq)},
			map[string]any{"role": "user", "content": fmt.Sprintf("Next, turn %d.", t)})
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": msgs})
	return body, fmt.Sprintf("bench-%d", seq)
}

// bodyMessages counts the messages of a chat request body: the objects of
// its top-level "messages" array, found by a scan that allocates nothing.
// json.Unmarshal into raw messages copied half a megabyte a request at 500
// messages, garbage whose collection fell into the timed requests.
func bodyMessages(b *testing.B, body []byte) int {
	depth, n, found := 0, 0, false
	inMsgs := false // in the top-level "messages" array
	key := false    // the last string at depth 1 was "messages"
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			j := i + 1
			for j < len(body) && body[j] != '"' {
				if body[j] == '\\' {
					j++
				}
				j++
			}
			key = depth == 1 && string(body[i+1:j]) == "messages"
			i = j
		case '[':
			if key && depth == 1 {
				inMsgs, found = true, true
			}
			key = false
			depth++
		case '{':
			if inMsgs && depth == 2 {
				n++
			}
			key = false
			depth++
		case '}', ']':
			depth--
			if depth == 1 {
				inMsgs = false
			}
		case ':', ' ', '\n', '\t', '\r':
		default:
			key = false
		}
	}
	if !found || depth != 0 {
		b.Fatalf("no messages array in the body %.200q", body)
	}
	return n
}

// reqCost sums what the proxy added to the requests of one class: the
// process's CPU (the proxied request's less the direct one's; both run the
// client and the fake upstream in this process) and heap allocations.
type reqCost struct {
	n             int
	cpu           time.Duration
	allocs, bytes float64
}

func (c *reqCost) add(cpu time.Duration, allocs, bytes float64) {
	c.n++
	c.cpu += cpu
	c.allocs += allocs
	c.bytes += bytes
}

func (c *reqCost) cpuMicros() float64 { return float64(c.cpu.Microseconds()) / float64(c.n) }

// BenchmarkProxyThroughput runs 32 concurrent clients, each its own
// conversation, first straight to the upstream then through the proxy,
// b.N requests each way, and reports requests per second and their ratio.
func BenchmarkProxyThroughput(b *testing.B) {
	const clients = 32
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			h := startServer(b, harnessOpts{budget: 64000, dsn: st.dsn})
			run := func(url string, viaProxy bool) float64 {
				var left atomic.Int64
				left.Store(int64(b.N))
				var wg sync.WaitGroup
				var failed atomic.Value
				start := time.Now()
				for c := 0; c < clients; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var conv conversation
						for left.Add(-1) >= 0 {
							body := conv.next()
							thread := ""
							if viaProxy {
								thread = conv.thread
							}
							rb, _, err := do(url, thread, body)
							if err == nil {
								err = conv.reply(rb)
							}
							if err != nil {
								failed.Store(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				return float64(b.N) / time.Since(start).Seconds()
			}
			b.ResetTimer()
			direct := run(h.llm.URL()+"/v1/chat/completions", false)
			proxied := run(h.url+"/v1/chat/completions", true)
			b.StopTimer()
			b.ReportMetric(direct, "direct-req/s")
			b.ReportMetric(proxied, "mneme-req/s")
			b.ReportMetric(proxied/direct, "throughput-ratio")
		})
	}
}
