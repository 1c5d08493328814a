package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
)

// TestBodyLimitBothAPIs: a body over MaxBodyBytes is 413 in the shape of
// the API the client speaks, and nothing reaches the log.
func TestBodyLimitBothAPIs(t *testing.T) {
	r := startRig(t, rigOpts{pxConfig: func(c *proxy.Config) { c.MaxBodyBytes = 64 << 10 }})
	big := strings.Repeat("x", 70<<10)
	for _, tc := range []struct {
		api  proxy.API
		path string
		body string
	}{
		{proxy.OpenAI, "/v1/chat/completions", chatBody("user", big)},
		{proxy.Anthropic, "/v1/messages", anthropicBody("s", "user", big)},
	} {
		t.Run(string(tc.api), func(t *testing.T) {
			before := r.snapshot(t, "default")
			status, _, body := r.do(t, "POST", tc.path, "", tc.body, proxy.HeaderThread, "big")
			if status != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413: %s", status, body)
			}
			if msg := errorShape(t, tc.api, body); !strings.Contains(msg, "over 65536 bytes") {
				t.Errorf("message %q", msg)
			}
			if after := r.snapshot(t, "default"); after != before {
				t.Errorf("the store changed:\n%s\nthen\n%s", before, after)
			}
		})
	}
}

// gate is a fakellm handler that holds every request whose last user text
// contains "hold" until release is closed, counting the held ones.
type gate struct {
	mu      sync.Mutex
	held    int
	release chan struct{}
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) reply(r fakellm.Request) fakellm.Reply {
	if strings.Contains(r.LastUserText, "hold") {
		g.mu.Lock()
		g.held++
		g.mu.Unlock()
		<-g.release
	}
	return fakellm.DefaultReply(r)
}

func (g *gate) waitHeld(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		g.mu.Lock()
		h := g.held
		g.mu.Unlock()
		if h >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests held upstream, want %d", h, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTenantConcurrencyLimit: with two requests of tenant A in flight and
// a limit of 2, A's next request on any route is 429 with Retry-After, in
// the shape of the API it speaks, and leaves the store unchanged; tenant B
// is not limited by A's load; once A's requests finish, A is served again.
func TestTenantConcurrencyLimit(t *testing.T) {
	g := newGate()
	r := startRig(t, rigOpts{
		keys:        map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"},
		concurrency: 2,
		llmOpts:     []fakellm.Option{fakellm.WithHandler(g.reply)},
	})
	// A thread of A's that is in the store: the held requests' threads
	// are new, their messages written with their replies.
	if status, _, body := r.do(t, "POST", "/v1/chat/completions", "key-a", chatBody("user", "hello"), proxy.HeaderThread, "done-0"); status != 200 {
		t.Fatalf("tenant A's first thread: %d %s", status, body)
	}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			status, _, body := r.do(t, "POST", "/v1/chat/completions", "key-a", chatBody("user", "hold please"), proxy.HeaderThread, "held-"+itoa(int64(i)))
			if status != 200 {
				t.Errorf("held request %d: %d %s", i, status, body)
			}
		}(i)
	}
	g.waitHeld(t, 2)
	before := r.snapshot(t, "tenant-a")

	for _, tc := range []struct {
		name, method, path, body string
		shape                    string // "openai", "anthropic" or "api"
	}{
		{"openai", "POST", "/v1/chat/completions", chatBody("user", "one more"), "openai"},
		{"openai stream", "POST", "/v1/chat/completions", strings.Replace(chatBody("user", "one more"), `{"model"`, `{"stream":true,"model"`, 1), "openai"},
		{"anthropic", "POST", "/v1/messages", anthropicBody("s", "user", "one more"), "anthropic"},
		{"api read", "GET", "/api/threads", "", "api"},
		{"api write", "PUT", "/api/memory/item?ns=n&key=k", `{"value":1}`, "api"},
		{"api delete", "DELETE", "/api/threads/held-0", "", "api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := r.do(t, tc.method, tc.path, "key-a", tc.body, proxy.HeaderThread, "rejected")
			if status != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429: %s", status, body)
			}
			if hdr.Get("Retry-After") != itoa(server.RetryAfterSeconds) {
				t.Errorf("Retry-After %q", hdr.Get("Retry-After"))
			}
			switch tc.shape {
			case "openai":
				errorShape(t, proxy.OpenAI, body)
			case "anthropic":
				if msg := errorShape(t, proxy.Anthropic, body); msg == "" {
					t.Error("no message")
				}
				if !strings.Contains(string(body), `"rate_limit_error"`) {
					t.Errorf("anthropic 429 without rate_limit_error: %s", body)
				}
			case "api":
				var eb api.ErrorBody
				if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
					t.Errorf("not the API's error shape: %s", body)
				}
			}
		})
	}
	// Another tenant is not held back by A's load.
	if status, _, body := r.do(t, "POST", "/v1/chat/completions", "key-b", chatBody("user", "hello from b"), proxy.HeaderThread, "b-1"); status != 200 {
		t.Errorf("tenant B: %d %s", status, body)
	}
	after := r.snapshot(t, "tenant-a")
	if after != before || !strings.Contains(before, "done-0") {
		t.Errorf("a rejected request changed tenant A's store:\nbefore\n%s\nafter\n%s", before, after)
	}
	close(g.release)
	wg.Wait()
	if status, _, body := r.do(t, "POST", "/v1/chat/completions", "key-a", chatBody("user", "after the burst"), proxy.HeaderThread, "later"); status != 200 {
		t.Errorf("tenant A after its requests finished: %d %s", status, body)
	}
}

// TestOutboundTimeouts: every call the proxy makes upstream is bounded by
// UpstreamTimeout: a model route whose upstream never answers, a stream
// that stalls after its first chunks, and a pass-through route whose
// upstream sends headers and then stalls.
func TestOutboundTimeouts(t *testing.T) {
	stall := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"data":[`))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	up := httptest.NewServer(stall)
	defer up.Close()
	r := startRig(t, rigOpts{pxConfig: func(c *proxy.Config) {
		c.UpstreamTimeout = 300 * time.Millisecond
		c.OpenAIUpstream = up.URL
	}})
	// The pass-through's headers came, then its body stalls: the proxy
	// ends the response at the deadline (the client sees a cut body).
	start := time.Now()
	resp, err := http.Get(r.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if d := time.Since(start); d > 5*time.Second || err == nil {
		t.Errorf("the stalled pass-through ended after %v with %v", d, err)
	}
	start = time.Now()
	status, _, b := r.do(t, "POST", "/v1/chat/completions", "", chatBody("user", "hi"))
	if d := time.Since(start); d > 5*time.Second || status < 500 {
		t.Errorf("the model route took %v: %d %.200s", d, status, b)
	}
}
