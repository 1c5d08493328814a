package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
	"github.com/mnemehq/mneme/store/inmem"
)

// obsHarness is `mneme serve` as server.New assembles it (the proxy, the
// JSON API, the inspector, metrics, MCP), on a loopback port with a fakellm
// upstream, and its logs as JSON in a buffer.
type obsHarness struct {
	url  string
	m    *mneme.Engine
	llm  *fakellm.Server
	logs *syncBuffer
}

type obsOpts struct {
	keys      map[string]string
	openaiKey string // upstream key the server imposes
	budget    int
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startObs(t testing.TB, o obsOpts) *obsHarness {
	t.Helper()
	if o.budget == 0 {
		o.budget = 16000
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	llm := fakellm.Start()
	pol := testPolicy(o.budget)
	srv, err := server.New(context.Background(), server.Config{Addr: "127.0.0.1:0", Keys: o.keys, Store: inmem.New(), Logger: logger,
		Engine: mneme.Config{Policy: &pol},
		Proxy:  proxy.Config{OpenAIUpstream: llm.URL(), AnthropicUpstream: llm.URL(), OpenAIKey: o.openaiKey}})
	if err != nil {
		t.Fatal(err)
	}
	m := srv.Engine()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
		llm.Close()
	})
	return &obsHarness{url: "http://" + ln.Addr().String(), m: m, llm: llm, logs: logs}
}

// session drives a scripted tool-heavy agent through the proxy (resend
// mode, as agents do): each step is a user nudge naming the ticket, a
// tool call, its large result and the model's reply; the whole history
// is resent each time.
func (h *obsHarness) session(t testing.TB, key, thread string, steps int) {
	t.Helper()
	type msg = map[string]any
	history := []msg{
		{"role": "system", "content": "You are a coding agent. Tools: read_file, grep."},
		{"role": "user", "content": "Fix the flaky TestCheckout (ticket INV-4401) in src/shop/checkout.go."},
	}
	for i := 0; i < steps; i++ {
		var body strings.Builder
		for l := 0; l < 60; l++ {
			fmt.Fprintf(&body, "src/shop/file_%d.go:%d: func handler%d_%d(w http.ResponseWriter) { serve(w, %d) }\n", i, l, i, l, l)
		}
		if i == 3 {
			body.WriteString("trace_id=checkout-failure-2026-03-15 total=4400 want=4401\n")
		}
		id := fmt.Sprintf("call_%d", i)
		if i > 0 {
			history = append(history, msg{"role": "user", "content": fmt.Sprintf("Step %d: keep going on INV-4401.", i)})
		}
		history = append(history,
			msg{"role": "assistant", "content": nil, "tool_calls": []msg{{"id": id, "type": "function", "function": msg{"name": "read_file", "arguments": fmt.Sprintf(`{"path":"src/shop/file_%d.go"}`, i)}}}},
			msg{"role": "tool", "tool_call_id": id, "content": body.String()},
		)
		b, _ := json.Marshal(msg{"model": "gpt-4o-mini", "messages": history})
		hdr := map[string]string{proxy.HeaderThread: thread}
		if key != "" {
			hdr["Authorization"] = "Bearer " + key
		}
		status, _, rb := post(t, h.url+"/v1/chat/completions", string(b), hdr)
		if status != http.StatusOK {
			t.Fatalf("step %d: %d %s", i, status, rb)
		}
		var cc struct {
			Choices []struct {
				Message msg `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(rb, &cc); err != nil || len(cc.Choices) == 0 {
			t.Fatalf("step %d: unreadable reply %s", i, rb)
		}
		history = append(history, msg{"role": "assistant", "content": cc.Choices[0].Message["content"]})
	}
}

// do sends a request to the server with the key and returns status and body.
func (h *obsHarness) do(t testing.TB, method, path, key string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
