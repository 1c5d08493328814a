package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
	"github.com/mnemehq/mneme/store"
)

// hungUpstream is an upstream that takes every request and answers none
// until the test ends; it counts the requests that reached it.
func hungUpstream(t *testing.T) (url string, reached *atomic.Int32) {
	reached = &atomic.Int32{}
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); up.Close() })
	return up.URL, reached
}

// Finding 1: the concurrency limit holds whatever the Accept header says;
// only MCP's event stream is exempt from the request slots, and it has a
// bound of its own.
func TestConcurrencyLimitIgnoresAcceptEventStream(t *testing.T) {
	url, reached := hungUpstream(t)
	const limit, clients = 3, 12
	r := startRig(t, rigOpts{concurrency: limit, pxConfig: func(c *proxy.Config) {
		c.OpenAIUpstream = url
		c.UpstreamTimeout = 5 * time.Second
	}})
	r.timeout = 10 * time.Second
	statuses := make(chan int, clients)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _, _ := r.do(t, "GET", "/v1/models", "", "", "Accept", "text/event-stream")
			statuses <- status
		}()
	}
	// The refused answer at once; the admitted ones wait on the upstream.
	refused := 0
	for refused < clients-limit {
		if s := <-statuses; s == http.StatusTooManyRequests {
			refused++
		} else {
			t.Fatalf("status %d before the limit's %d refusals", s, clients-limit)
		}
	}
	// A window read that asks for an event stream is limited too.
	if status, _, b := r.do(t, "GET", "/api/threads/x/window", "", "", "Accept", "text/event-stream"); status != http.StatusTooManyRequests {
		t.Fatalf("GET /api/threads/x/window with Accept: text/event-stream at the limit: %d %s, want 429", status, b)
	}
	if n := reached.Load(); n > limit {
		t.Fatalf("%d requests reached the upstream, limit %d", n, limit)
	}
	wg.Wait()
}

// Finding 2: slow bodies do not hold a tenant's slots (a body is read
// before its request takes one, within BodyTimeout), and idle keep-alive
// connections are closed (IdleTimeout) or make room for new ones
// (MaxConns).
func TestSlowBodiesHoldNoSlots(t *testing.T) {
	const limit = 2
	r := startRig(t, rigOpts{concurrency: limit, srvConfig: func(c *server.Config) { c.BodyTimeout = 500 * time.Millisecond }})
	host := strings.TrimPrefix(r.url, "http://")
	var slow []net.Conn
	for i := 0; i < 3*limit; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Headers and the body's first byte, then nothing.
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		slow = append(slow, c)
	}
	// While they stall, the tenant's other requests get slots.
	for i := 0; i < 2*limit; i++ {
		if status, _, b := r.do(t, "GET", "/api/threads", "", ""); status != http.StatusOK {
			t.Fatalf("GET /api/threads while %d bodies stall: %d %s", len(slow), status, b)
		}
	}
	// The stalled ones are answered 408 when their body does not come.
	for _, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a stalled body got no answer: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("a stalled body: %d, want 408", resp.StatusCode)
		}
	}
}

func TestIdleConnectionsAreBounded(t *testing.T) {
	const maxConns = 8
	r := startRig(t, rigOpts{srvConfig: func(c *server.Config) {
		c.MaxConns = maxConns
		c.IdleTimeout = 300 * time.Millisecond
	}})
	host := strings.TrimPrefix(r.url, "http://")
	// A keep-alive connection left idle after its request is closed by the
	// server: the read returns once the idle timeout passes.
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection: read %v, want EOF (closed by the server)", err)
	}
	// At the bound, idle connections make room: 3×maxConns connections that
	// send nothing, then a client that works.
	var idle []net.Conn
	for i := 0; i < 3*maxConns; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	if status, _, b := r.do(t, "GET", "/healthz", "", ""); status != http.StatusOK {
		t.Fatalf("GET /healthz with %d idle connections: %d %s", len(idle), status, b)
	}
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			closed++
		}
	}
	if closed < len(idle)-maxConns {
		t.Fatalf("%d of %d idle connections closed, want at least %d", closed, len(idle), len(idle)-maxConns)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errorMessage returns the message of an error body in any of the shapes.
func errorMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error.Message
}

// Finding 3: the SQLite file removed while serving is noticed: the health
// check fails, writes answer 503 with Retry-After, and nothing is
// acknowledged that the file does not hold.
func TestSQLiteFileRemovedWhileServing(t *testing.T) {
	r := startRig(t, rigOpts{backend: "sqlite"})
	if status, _, b := r.do(t, "POST", "/v1/chat/completions", "", chatBody("user", "before"), proxy.HeaderThread, "gone"); status != 200 {
		t.Fatalf("before: %d %s", status, b)
	}
	if status, _, _ := r.do(t, "GET", "/healthz", "", ""); status != 200 {
		t.Fatalf("healthz before: %d", status)
	}
	for _, p := range []string{r.sqlite, r.sqlite + "-wal", r.sqlite + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if status, _, b := r.do(t, "GET", "/healthz", "", ""); status != http.StatusServiceUnavailable {
		t.Fatalf("healthz after the removal: %d %s, want 503", status, b)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", chatBody("user", "before", "assistant", "ok", "user", "after")},
		{"PUT", "/api/memory/item?ns=notes&key=k", `{"value":"v"}`},
	} {
		status, hdr, b := r.do(t, c.method, c.path, "", c.body, proxy.HeaderThread, "gone")
		if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Fatalf("%s %s after the removal: %d (Retry-After %q) %s, want 503 with Retry-After", c.method, c.path, status, hdr.Get("Retry-After"), b)
		}
		if strings.Contains(string(b), r.sqlite) || strings.Contains(string(b), "sqlite") {
			t.Errorf("the 503 body shows internals: %s", b)
		}
	}
}

// faultyStore answers every write with err.
type faultyStore struct {
	store.Store
	err error
}

func (f faultyStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	return nil, f.err
}

func (f faultyStore) PutMemory(ctx context.Context, tenant string, it store.Memory) (store.Memory, error) {
	return store.Memory{}, f.err
}

// Finding 4: a full disk is 503 with Retry-After in the API's shape; no
// 5xx body carries internal error text or an upstream URL, and each gives
// the request id that the log line holds with the error.
func TestFaultsAnswerWithoutInternals(t *testing.T) {
	full := fmt.Errorf("%w: sqlite: commit: database or disk is full (13)", store.ErrUnavailable)
	var logs syncBuffer
	r := startRig(t, rigOpts{logTo: &logs, wrap: func(st store.Store) store.Store { return faultyStore{st, full} }})
	for _, c := range []struct {
		name, method, path, body string
		api                      proxy.API
	}{
		{"openai", "POST", "/v1/chat/completions", chatBody("user", "hello"), proxy.OpenAI},
		{"anthropic", "POST", "/v1/messages", anthropicBody("s", "user", "hello"), proxy.Anthropic},
		{"api", "PUT", "/api/memory/item?ns=notes&key=k", `{"value":"v"}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, hdr, b := r.do(t, c.method, c.path, "", c.body, proxy.HeaderThread, "full")
			if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
				t.Fatalf("%d (Retry-After %q) %s, want 503 with Retry-After", status, hdr.Get("Retry-After"), b)
			}
			if c.api != "" {
				errorShape(t, c.api, b)
			}
			checkNoInternals(t, b, hdr, &logs, "disk is full")
		})
	}

	// An unreachable upstream: 502 without its URL.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	var logs2 syncBuffer
	r2 := startRig(t, rigOpts{logTo: &logs2, pxConfig: func(c *proxy.Config) { c.OpenAIUpstream = dead }})
	status, hdr, b := r2.do(t, "POST", "/v1/chat/completions", "", chatBody("user", "hello"), proxy.HeaderThread, "dead")
	if status != http.StatusBadGateway {
		t.Fatalf("unreachable upstream: %d %s, want 502", status, b)
	}
	if strings.Contains(string(b), strings.TrimPrefix(dead, "http://")) {
		t.Errorf("the 502 body names the upstream: %s", b)
	}
	checkNoInternals(t, b, hdr, &logs2, "connection refused")
}

// checkNoInternals: the body gives the request id of the header, not the
// error's text; the log holds both.
func checkNoInternals(t *testing.T, b []byte, hdr http.Header, logs *syncBuffer, internal string) {
	t.Helper()
	id := hdr.Get("X-Request-Id")
	if id == "" || !strings.Contains(errorMessage(b), id) {
		t.Errorf("the body does not give the request id %q: %s", id, b)
	}
	if strings.Contains(string(b), internal) || strings.Contains(string(b), "sqlite") {
		t.Errorf("the body carries internal text: %s", b)
	}
	found := false
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, id) && strings.Contains(line, internal) {
			found = true
		}
	}
	if !found {
		t.Errorf("no log line holds request id %s with the error %q:\n%s", id, internal, logs.String())
	}
}

// Finding 5: thread ids and stored strings are valid UTF-8 without NUL on
// every backend, and lone surrogates are refused: 400 with a clear message,
// nothing stored, the same on SQLite and PostgreSQL.
func TestTextThatNoBackendKeeps(t *testing.T) {
	for _, backend := range backendsUnderTest {
		t.Run(backend, func(t *testing.T) {
			r := startRig(t, rigOpts{backend: backend})
			for _, c := range []struct {
				name, method, path, body string
				hdr                      []string
			}{
				{"thread id header", "POST", "/v1/chat/completions", chatBody("user", "hi"), []string{proxy.HeaderThread, "bad\xff"}},
				{"thread id path", "GET", "/api/threads/bad%FF", "", nil},
				{"thread id NUL", "GET", "/api/threads/bad%00", "", nil},
				{"lone surrogate", "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a \ud800 b"}]}`, []string{proxy.HeaderThread, "sur"}},
				{"NUL escape", "POST", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"a \u0000 b"}]}`, []string{proxy.HeaderThread, "nul"}},
				{"memory value", "PUT", "/api/memory/item?ns=notes&key=k", `{"value":"\udc00"}`, nil},
				{"memory key", "PUT", "/api/memory/item?ns=notes&key=k%FF", `{"value":"v"}`, nil},
			} {
				status, _, b := r.do(t, c.method, c.path, "", c.body, c.hdr...)
				if status != http.StatusBadRequest {
					t.Errorf("%s: %d %s, want 400", c.name, status, b)
					continue
				}
				if msg := errorMessage(b); !strings.Contains(msg, "UTF-8") && !strings.Contains(msg, "NUL") && !strings.Contains(msg, "surrogate") {
					t.Errorf("%s: message %q does not say what is wrong", c.name, msg)
				}
				if strings.Contains(string(b), "postgres") || strings.Contains(string(b), "sqlite") {
					t.Errorf("%s: the body shows the backend: %s", c.name, b)
				}
			}
			if snap := r.snapshot(t, "default"); snap != "" {
				t.Errorf("refused input was stored:\n%s", snap)
			}
		})
	}
}

// Finding 6: a ttl_seconds that overflows is a clear 400; malformed
// JSON-RPC on /mcp is a JSON-RPC error object.
func TestTTLOverflowAndMCPParseError(t *testing.T) {
	r := startRig(t, rigOpts{})
	for _, ttl := range []string{"9300000000000", "99999999999999999999", "-1"} {
		status, _, b := r.do(t, "PUT", "/api/memory/item?ns=notes&key=k", "", `{"value":"v","ttl_seconds":`+ttl+`}`)
		if status != http.StatusBadRequest || !strings.Contains(errorMessage(b), "ttl_seconds must be an integer in [0,") {
			t.Errorf("ttl_seconds %s: %d %s, want 400 naming the range", ttl, status, b)
		}
	}
	for _, body := range []string{`{"jsonrpc":"2.0",`, `not json`} {
		status, hdr, b := r.do(t, "POST", "/mcp", "", body, "Accept", "application/json, text/event-stream")
		var rpc struct {
			JSONRPC string `json:"jsonrpc"`
			ID      any    `json:"id"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &rpc); err != nil || rpc.JSONRPC != "2.0" || rpc.Error.Code != -32700 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("malformed JSON-RPC %q: %d %s %s, want a JSON-RPC parse error (-32700)", body, status, hdr.Get("Content-Type"), b)
		}
	}
}

// Finding 6: with the server's own key, the client's cookies and provider
// account headers do not go upstream.
func TestServerKeyDropsClientAccountHeaders(t *testing.T) {
	r := startRig(t, rigOpts{keys: map[string]string{"k-a": "a"}, pxConfig: func(c *proxy.Config) { c.OpenAIKey = "sk-server" }})
	hdr := []string{"Cookie", "session=client-secret", "OpenAI-Organization", "org-client", "OpenAI-Project", "proj-client", proxy.HeaderThread, "hdrs"}
	if status, _, b := r.do(t, "POST", "/v1/chat/completions", "k-a", chatBody("user", "hi"), hdr...); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	if status, _, b := r.do(t, "GET", "/v1/models", "k-a", "", hdr...); status != 200 {
		t.Fatalf("models: %d %s", status, b)
	}
	reqs := r.llm.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for _, q := range reqs {
		for _, k := range []string{"Cookie", "Openai-Organization", "Openai-Project"} {
			if v := q.Header.Get(k); v != "" {
				t.Errorf("%s %s: upstream got %s: %s", q.Method, q.Path, k, v)
			}
		}
		if a := q.Header.Get("Authorization"); a != "Bearer sk-server" {
			t.Errorf("%s %s: upstream Authorization %q", q.Method, q.Path, a)
		}
	}
}
