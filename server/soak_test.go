package server_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/window"
)

// soakFor is how long TestSoak runs; 0 skips it (it is not part of CI):
//
//	go test ./server -run Soak -soak=10m -v
var soakFor = flag.Duration("soak", 0, "run TestSoak at steady load for this long")

// TestSoak drives `mneme serve` on SQLite (summarizer on, background
// buffering on) at a steady load: clients running resend sessions through
// both APIs, streaming and not, with API reads and searches between, each
// client moving to a new thread now and then. It measures goroutines and
// heap after a warm-up and at the end, both with the load paused and idle
// connections closed, and fails when the goroutines grew.
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("soak test: run with -soak=10m")
	}
	upstream := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	r := startRig(t, rigOpts{
		backend: "sqlite",
		budget:  12000,
		pxConfig: func(c *proxy.Config) {
			c.Client = upstream
		},
		mConfig: func(c *mneme.Config, llmURL string) {
			c.Summarizer = compact.LLMConfig{Model: "gpt-4o-mini", API: "openai", URL: llmURL}
			c.Buffer = true
			c.Policy.Strategy = window.Observe
		},
	})
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: time.Minute}

	const clients = 4
	var requests, failures atomic.Int64
	run := func(ctx context.Context) {
		var wg sync.WaitGroup
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				soakClient(ctx, t, r.url, client, c, &requests, &failures)
			}(c)
		}
		wg.Wait()
	}
	measure := func(label string) (int, uint64) {
		r.llm.Reset() // the fake upstream records every request: not the server's memory
		client.CloseIdleConnections()
		upstream.CloseIdleConnections()
		time.Sleep(500 * time.Millisecond) // connection goroutines wind down
		for i := 0; i < 20 && r.m.RunningJobs() > 0; i++ {
			time.Sleep(250 * time.Millisecond) // background observations finish
		}
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		g := runtime.NumGoroutine()
		t.Logf("%s: goroutines %d, heap in use %.1f MiB, heap objects %d, requests %d, failures %d", label, g, float64(ms.HeapInuse)/(1<<20), ms.HeapObjects, requests.Load(), failures.Load())
		return g, ms.HeapInuse
	}

	warm, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	run(warm)
	cancel()
	g0, h0 := measure("start (after a 15 s warm-up)")

	soak, cancel := context.WithTimeout(context.Background(), *soakFor)
	defer cancel()
	stopTicks := make(chan struct{})
	var tickWG sync.WaitGroup
	tickWG.Add(1)
	go func() {
		defer tickWG.Done()
		tk := time.NewTicker(30 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stopTicks:
				return
			case <-tk.C:
				r.llm.Reset()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				t.Logf("during: goroutines %d, heap in use %.1f MiB, requests %d, failures %d", runtime.NumGoroutine(), float64(ms.HeapInuse)/(1<<20), requests.Load(), failures.Load())
			}
		}
	}()
	run(soak)
	close(stopTicks)
	tickWG.Wait()
	g1, h1 := measure("end")
	t.Logf("goroutines %d -> %d; heap in use %.1f -> %.1f MiB", g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20))
	if f := failures.Load(); f > 0 {
		t.Errorf("%d of %d requests failed", f, requests.Load())
	}
	if g1 > g0+5 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Errorf("goroutines grew from %d to %d under the soak:\n%s", g0, g1, buf[:n])
	}
}

// soakClient runs sessions until ctx ends: a resend session through one of
// the two APIs (streaming every other step), an API read or search every
// few steps, a new thread every 30 steps. It paces itself (steady load, not
// a stress test).
func soakClient(ctx context.Context, t *testing.T, base string, c *http.Client, id int, requests, failures *atomic.Int64) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	session := 0
	for ctx.Err() == nil {
		session++
		thread := fmt.Sprintf("soak-%d-%d", id, session)
		anthropic := (id+session)%2 == 1
		type msg = map[string]any
		var history []msg
		system := "You are a soak-test agent."
		if !anthropic {
			history = append(history, msg{"role": "system", "content": system})
		}
		for step := 0; step < 30 && ctx.Err() == nil; step++ {
			lines := make([]string, 20+rng.IntN(60))
			for i := range lines {
				lines[i] = fmt.Sprintf("step %d line %d of session %s: value=%d", step, i, thread, rng.IntN(1e6))
			}
			history = append(history, msg{"role": "user", "content": strings.Join(lines, "\n")})
			body := msg{"model": "gpt-4o-mini", "messages": history, "stream": step%2 == 1}
			path := "/v1/chat/completions"
			if anthropic {
				body["model"], body["max_tokens"], body["system"] = "claude-sonnet-4-5", 256, system
				path = "/v1/messages"
			}
			b, _ := json.Marshal(body)
			status, rb, err := soakPost(ctx, c, base+path, thread, b)
			requests.Add(1)
			if ctx.Err() != nil {
				return
			}
			if err != nil || status != 200 {
				failures.Add(1)
				t.Logf("soak %s step %d: %d %v %.200s", thread, step, status, err, rb)
				break
			}
			history = append(history, msg{"role": "assistant", "content": replyText(rb)})
			if step%5 == 4 {
				for _, p := range []string{"/api/threads/" + thread + "/window", "/api/search?q=value", "/api/threads?limit=5"} {
					req, _ := http.NewRequestWithContext(ctx, "GET", base+p, nil)
					resp, err := c.Do(req)
					requests.Add(1)
					if err != nil {
						if ctx.Err() == nil {
							failures.Add(1)
						}
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failures.Add(1)
						t.Logf("soak GET %s: %d", p, resp.StatusCode)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func soakPost(ctx context.Context, c *http.Client, url, thread string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(proxy.HeaderThread, thread)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// replyText returns the assistant's text of a reply, streamed or not, in
// either API's shape.
func replyText(body []byte) string {
	var text strings.Builder
	s := string(body)
	if strings.HasPrefix(strings.TrimSpace(s), "{") {
		var v struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		_ = json.Unmarshal(body, &v)
		for _, c := range v.Choices {
			text.WriteString(c.Message.Content)
		}
		for _, c := range v.Content {
			text.WriteString(c.Text)
		}
		return text.String()
	}
	for _, line := range strings.Split(s, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		for _, c := range ev.Choices {
			text.WriteString(c.Delta.Content)
		}
		text.WriteString(ev.Delta.Text)
	}
	return text.String()
}
