package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The findings of issue 17, each against a real `mneme serve` process, so
// that the same tests run against any build (MNEME_BIN): on the code the
// issue was filed against they fail, on today's they pass
// (scripts/old-code-proof runs both). Findings 3 and 4 are the fault
// suite's TestFaultFileRemoved, TestFaultDiskFull and
// TestFaultHungUpstream100 (5xx bodies); finding 2's idle connections are
// TestFault3000IdleConnections; finding 7 is the engine's, tested in the
// root package.

// do sends one request and returns its status, headers and body.
func do(t *testing.T, method, url, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// errMessage is the message of an error body (OpenAI, Anthropic or the
// JSON API's shape: all carry error.message).
func errMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error.Message
}

// TestFinding1EventStreamBypass: a GET asking for an event stream takes a
// request slot like any other (the old exemption let every such GET reach
// a hung upstream), and so does a window read.
func TestFinding1EventStreamBypass(t *testing.T) {
	var reached atomic.Int32
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	const limit, clients = 3, 12
	p := startServe(t, "bypass", "--store", "sqlite:"+filepath.Join(t.TempDir(), "m.db"), "--openai-upstream", up.URL,
		"--tenant-concurrency", fmt.Sprint(limit), "--upstream-timeout", "3s")
	statuses := make(chan int, clients)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _, _ := do(t, "GET", p.url()+"/v1/models", "", "Accept", "text/event-stream")
			statuses <- st
		}()
	}
	// The refused answer at once; the admitted wait on the upstream for
	// its 3 s timeout. Refusals are counted for 1.5 s.
	tally := newFaultTally()
	refused := 0
	wait := time.After(1500 * time.Millisecond)
collect:
	for refused < clients-limit {
		select {
		case st := <-statuses:
			tally.add(st, "")
			if st == http.StatusTooManyRequests {
				refused++
			}
		case <-wait:
			break collect
		}
	}
	winStatus, _, winBody := do(t, "GET", p.url()+"/api/threads/x/window", "", "Accept", "text/event-stream")
	wg.Wait()
	close(statuses)
	for st := range statuses {
		tally.add(st, "")
	}
	t.Logf("%d GET /v1/models with Accept: text/event-stream, limit %d, hung upstream: %s; upstream reached %d times; a window read at the limit: %d",
		clients, limit, tally, reached.Load(), winStatus)
	if n := reached.Load(); n > limit {
		t.Errorf("%d requests reached the upstream past the limit of %d", n, limit)
	}
	if refused < clients-limit {
		t.Errorf("%d refused at once, want %d", refused, clients-limit)
	}
	if winStatus != http.StatusTooManyRequests {
		t.Errorf("GET /api/threads/x/window with Accept: text/event-stream at the limit: %d %s, want 429", winStatus, winBody)
	}
}

// TestFinding2SlowBodies: requests whose body never comes do not hold the
// tenant's slots; they are answered 408 once the body timeout passes.
func TestFinding2SlowBodies(t *testing.T) {
	m := startModel(t)
	const limit = 2
	p := startServe(t, "slow", "--store", "sqlite:"+filepath.Join(t.TempDir(), "m.db"), "--openai-upstream", m.upstream(),
		"--tenant-concurrency", fmt.Sprint(limit), "--body-timeout", "1s")
	host := strings.TrimPrefix(p.url(), "http://")
	var slow []net.Conn
	for i := 0; i < 3*limit; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		slow = append(slow, c)
	}
	// The stalled requests' headers are on the wire before the probes
	// start; the old server took a slot for each as soon as it read them.
	probes := newFaultTally()
	for i := 0; i < 2*limit; i++ {
		st, _, b := do(t, "GET", p.url()+"/api/threads", "")
		probes.add(st, string(b))
	}
	stalled := newFaultTally()
	for _, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(8 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			stalled.add(0, err.Error())
			continue
		}
		resp.Body.Close()
		stalled.add(resp.StatusCode, "")
	}
	t.Logf("%d stalled bodies, limit %d: GET /api/threads meanwhile %s; the stalled got %s (0: no answer in 8 s: %s)",
		len(slow), limit, probes, stalled, stalled.bodies[0])
	if probes.counts[200] != 2*limit {
		t.Errorf("the tenant's other requests while bodies stall: %s, want %d×200", probes, 2*limit)
	}
	if stalled.counts[http.StatusRequestTimeout] != len(slow) {
		t.Errorf("stalled bodies: %s, want %d×408", stalled, len(slow))
	}
}

// TestFinding5Text: thread ids and stored strings must be valid UTF-8
// without NUL, lone surrogates refused: 400 saying what is wrong, without
// the backend's text, nothing stored; the same on SQLite and PostgreSQL.
func TestFinding5Text(t *testing.T) {
	m := startModel(t)
	stores := map[string]func(t testing.TB) string{
		"sqlite":   func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "m.db") },
		"postgres": postgresDSN,
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			p := startServe(t, "text-"+backend, "--store", stores[backend](t), "--openai-upstream", m.upstream(), "--anthropic-upstream", m.upstream())
			for _, c := range []struct {
				name, method, path, body string
				hdr                      []string
			}{
				{"thread id header", "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, []string{"X-Mneme-Thread", "bad\xff"}},
				{"thread id path", "GET", "/api/threads/bad%FF", "", nil},
				{"thread id NUL", "GET", "/api/threads/bad%00", "", nil},
				{"lone surrogate", "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a \ud800 b"}]}`, []string{"X-Mneme-Thread", "sur"}},
				{"NUL escape", "POST", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"a \u0000 b"}]}`, []string{"X-Mneme-Thread", "nul"}},
				{"memory value", "PUT", "/api/memory/item?ns=notes&key=k", `{"value":"\udc00"}`, nil},
				{"memory key", "PUT", "/api/memory/item?ns=notes&key=k%FF", `{"value":"v"}`, nil},
			} {
				st, _, b := do(t, c.method, p.url()+c.path, c.body, c.hdr...)
				t.Logf("%s: %d %s", c.name, st, strings.TrimSpace(string(b)))
				if st != http.StatusBadRequest {
					t.Errorf("%s: %d, want 400", c.name, st)
					continue
				}
				if msg := errMessage(b); !strings.Contains(msg, "UTF-8") && !strings.Contains(msg, "NUL") && !strings.Contains(msg, "surrogate") {
					t.Errorf("%s: message %q does not say what is wrong", c.name, msg)
				}
				if strings.Contains(string(b), "postgres") || strings.Contains(string(b), "sqlite") {
					t.Errorf("%s: the body shows the backend: %s", c.name, b)
				}
			}
			st, _, b := do(t, "GET", p.url()+"/api/threads", "")
			var list struct {
				Threads []struct {
					ID string `json:"id"`
				} `json:"threads"`
			}
			if err := json.Unmarshal(b, &list); st != 200 || err != nil {
				t.Fatalf("GET /api/threads: %d %v %s", st, err, b)
			}
			for _, th := range list.Threads {
				t.Errorf("refused input left thread %q", th.ID)
			}
			if st, _, b := do(t, "GET", p.url()+"/api/memory?ns=notes&q=k", ""); st == 200 && strings.Contains(string(b), `"key"`) {
				t.Errorf("refused input left a memory: %s", b)
			}
		})
	}
}

// TestFinding6TTLAndMCP: a ttl_seconds that overflows is a 400 naming the
// range (not "negative ttl"); malformed JSON-RPC on /mcp is a JSON-RPC
// parse error object, not 400 text/plain.
func TestFinding6TTLAndMCP(t *testing.T) {
	m := startModel(t)
	p := startServe(t, "small", "--store", "sqlite:"+filepath.Join(t.TempDir(), "m.db"), "--openai-upstream", m.upstream())
	for _, ttl := range []string{"9300000000000", "99999999999999999999", "-1"} {
		st, _, b := do(t, "PUT", p.url()+"/api/memory/item?ns=notes&key=k", `{"value":"v","ttl_seconds":`+ttl+`}`)
		t.Logf("ttl_seconds %s: %d %s", ttl, st, strings.TrimSpace(string(b)))
		if st != http.StatusBadRequest || !strings.Contains(errMessage(b), "ttl_seconds must be an integer in [0,") {
			t.Errorf("ttl_seconds %s: %d %s, want 400 naming the range", ttl, st, b)
		}
	}
	for _, body := range []string{`{"jsonrpc":"2.0",`, `not json`} {
		st, hdr, b := do(t, "POST", p.url()+"/mcp", body, "Accept", "application/json, text/event-stream")
		t.Logf("POST /mcp %q: %d %s %s", body, st, hdr.Get("Content-Type"), strings.TrimSpace(string(b)))
		var rpc struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &rpc); err != nil || rpc.JSONRPC != "2.0" || rpc.Error.Code != -32700 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("malformed JSON-RPC %q: %d %s %s, want a JSON-RPC parse error (-32700)", body, st, hdr.Get("Content-Type"), b)
		}
	}
}

// TestFinding6ServerKeyHeaders: with the server's own upstream key, the
// client's Cookie and provider-account headers stay out of the upstream
// requests (chat and a forwarded route).
func TestFinding6ServerKeyHeaders(t *testing.T) {
	m := startModel(t)
	p := startServe(t, "hdrs", "--store", "sqlite:"+filepath.Join(t.TempDir(), "m.db"), "--openai-upstream", m.upstream(),
		"--openai-key", "sk-server", "--auth-keys", "k-a=a")
	hdr := []string{"Authorization", "Bearer k-a", "Cookie", "session=client-secret", "OpenAI-Organization", "org-client", "OpenAI-Project", "proj-client", "X-Mneme-Thread", "hdrs"}
	if st, _, b := do(t, "POST", p.url()+"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, hdr...); st != 200 {
		t.Fatalf("chat: %d %s", st, b)
	}
	if st, _, b := do(t, "GET", p.url()+"/v1/models", "", hdr...); st != 200 {
		t.Fatalf("models: %d %s", st, b)
	}
	reqs := m.fake.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	for _, q := range reqs {
		var got []string
		for _, k := range []string{"Cookie", "Openai-Organization", "Openai-Project"} {
			if v := q.Header.Get(k); v != "" {
				got = append(got, k+": "+v)
				t.Errorf("%s %s: the upstream got %s: %s", q.Method, q.Path, k, v)
			}
		}
		if a := q.Header.Get("Authorization"); a != "Bearer sk-server" {
			t.Errorf("%s %s: upstream Authorization %q, want the server's key", q.Method, q.Path, a)
		}
		t.Logf("%s %s upstream: client headers forwarded %v", q.Method, q.Path, got)
	}
}
