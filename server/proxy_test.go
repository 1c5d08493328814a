package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
)

func chatBody(msgs ...string) string {
	var parts []string
	for i := 0; i+1 < len(msgs); i += 2 {
		b, _ := json.Marshal(map[string]string{"role": msgs[i], "content": msgs[i+1]})
		parts = append(parts, string(b))
	}
	return `{"model":"gpt-4o-mini","messages":[` + strings.Join(parts, ",") + `]}`
}

func anthropicBody(system string, msgs ...string) string {
	var parts []string
	for i := 0; i+1 < len(msgs); i += 2 {
		b, _ := json.Marshal(map[string]string{"role": msgs[i], "content": msgs[i+1]})
		parts = append(parts, string(b))
	}
	s, _ := json.Marshal(system)
	return `{"model":"claude-sonnet-4-5","max_tokens":256,"system":` + string(s) + `,"messages":[` + strings.Join(parts, ",") + `]}`
}

// errorShape checks that body is an error in the shape of api.
func errorShape(t *testing.T, api proxy.API, body []byte) string {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	if api == proxy.Anthropic && v.Type != "error" {
		t.Errorf("anthropic error without type=error: %s", body)
	}
	if v.Error.Message == "" || v.Error.Type == "" {
		t.Errorf("error without message or type: %s", body)
	}
	return v.Error.Message
}

func TestErrors(t *testing.T) {
	big := strings.Repeat("word ", 40000)
	tests := []struct {
		name       string
		api        proxy.API
		body       string
		script     *fakellm.Reply
		pxConfig   func(*proxy.Config)
		wantStatus int
		wantMsg    string
		wantLogged bool // the user's message is in the log anyway (I1)
	}{
		{name: "malformed JSON openai", api: proxy.OpenAI, body: `{"model":"x","messages":[`, wantStatus: 400, wantMsg: "not valid JSON"},
		{name: "malformed JSON anthropic", api: proxy.Anthropic, body: `{"model":`, wantStatus: 400, wantMsg: "not valid JSON"},
		{name: "not an object", api: proxy.OpenAI, body: `[1,2]`, wantStatus: 400, wantMsg: "JSON object"},
		{name: "bad message", api: proxy.OpenAI, body: `{"model":"x","messages":[{"role":"wizard","content":"hi"}]}`, wantStatus: 400, wantMsg: "messages[0]"},
		{name: "missing messages", api: proxy.Anthropic, body: `{"model":"x","max_tokens":5}`, wantStatus: 400, wantMsg: "messages"},
		{name: "body over the limit", api: proxy.OpenAI, body: chatBody("user", big), pxConfig: func(c *proxy.Config) { c.MaxBodyBytes = 1 << 16 }, wantStatus: 413, wantMsg: "over"},
		{name: "budget impossible", api: proxy.OpenAI, body: chatBody("system", big, "user", "hi"), wantStatus: 400, wantMsg: "budget:", wantLogged: false},
		{name: "upstream status passed through", api: proxy.OpenAI, body: chatBody("user", "hi"), script: &fakellm.Reply{Status: 429}, wantStatus: 429, wantLogged: true},
		{name: "upstream status passed through anthropic", api: proxy.Anthropic, body: anthropicBody("s", "user", "hi"), script: &fakellm.Reply{Status: 529}, wantStatus: 529, wantLogged: true},
		{name: "upstream unreachable", api: proxy.OpenAI, body: chatBody("user", "hi"), pxConfig: func(c *proxy.Config) { c.OpenAIUpstream = closedURL(t) }, wantStatus: 502, wantMsg: "unreachable", wantLogged: true},
		{name: "upstream unreachable anthropic", api: proxy.Anthropic, body: anthropicBody("s", "user", "hi"), pxConfig: func(c *proxy.Config) { c.AnthropicUpstream = closedURL(t) }, wantStatus: 502, wantMsg: "unreachable", wantLogged: true},
		{name: "upstream timeout", api: proxy.OpenAI, body: chatBody("user", "hi"), script: &fakellm.Reply{Delay: 2 * time.Second}, pxConfig: func(c *proxy.Config) { c.UpstreamTimeout = 200 * time.Millisecond }, wantStatus: 504, wantMsg: "in time", wantLogged: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startServer(t, harnessOpts{pxConfig: tc.pxConfig})
			if tc.script != nil {
				h.llm.Enqueue(*tc.script)
			}
			path := "/v1/chat/completions"
			if tc.api == proxy.Anthropic {
				path = "/v1/messages"
			}
			status, hdr, body := post(t, h.url+path, tc.body, map[string]string{proxy.HeaderThread: "t1"})
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tc.wantStatus, body)
			}
			if tc.wantStatus == 429 || tc.wantStatus == 529 {
				// Passed through as the upstream wrote it.
				if !strings.Contains(string(body), "error") || hdr.Get("Retry-After") == "" {
					t.Errorf("upstream error not passed through: %v %s", hdr, body)
				}
			} else if msg := errorShape(t, tc.api, body); !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("message %q, want it to contain %q", msg, tc.wantMsg)
			}
			logged := len(h.messages(t, "default", "t1")) > 0
			if logged != tc.wantLogged {
				t.Errorf("user message logged = %v, want %v", logged, tc.wantLogged)
			}
		})
	}
}

// closedURL returns the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestAuth(t *testing.T) {
	h := startServer(t, harnessOpts{
		keys: map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"},
		pxConfig: func(c *proxy.Config) {
			c.OpenAIKey = "sk-server-openai"
			c.AnthropicKey = "sk-server-anthropic"
		},
	})
	tests := []struct {
		name       string
		path, body string
		hdr        map[string]string
		wantStatus int
		api        proxy.API
	}{
		{"no key openai", "/v1/chat/completions", chatBody("user", "hi"), nil, 401, proxy.OpenAI},
		{"bad key openai", "/v1/chat/completions", chatBody("user", "hi"), map[string]string{"Authorization": "Bearer nope"}, 401, proxy.OpenAI},
		{"no key anthropic", "/v1/messages", anthropicBody("s", "user", "hi"), map[string]string{"anthropic-version": "2023-06-01"}, 401, proxy.Anthropic},
		{"bad key other route", "/v1/models", "", map[string]string{"x-api-key": "nope", "anthropic-version": "2023-06-01"}, 401, proxy.Anthropic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := post(t, h.url+tc.path, tc.body, tc.hdr)
			if status != tc.wantStatus {
				t.Fatalf("status %d: %s", status, body)
			}
			errorShape(t, tc.api, body)
		})
	}
	// Each key's tenant gets its own thread; the upstream sees the server's
	// keys, never the client's Mneme key.
	for _, k := range []struct{ hdr, val, tenant string }{{"Authorization", "Bearer key-a", "tenant-a"}, {"x-api-key", "key-b", "tenant-b"}} {
		status, _, body := post(t, h.url+"/v1/chat/completions", chatBody("user", "secret of "+k.tenant), map[string]string{k.hdr: k.val, proxy.HeaderThread: "same"})
		if status != 200 {
			t.Fatalf("%s: %d %s", k.tenant, status, body)
		}
		if got := summary(h.messages(t, k.tenant, "same")); len(got) != 2 || got[0] != "user:secret of "+k.tenant {
			t.Errorf("%s log: %v", k.tenant, got)
		}
	}
	status, _, body := post(t, h.url+"/v1/messages", anthropicBody("s", "user", "hi"), map[string]string{"x-api-key": "key-a", "anthropic-version": "2023-06-01"})
	if status != 200 {
		t.Fatalf("anthropic: %d %s", status, body)
	}
	for _, r := range h.llm.Requests() {
		auth := r.Header.Get("Authorization") + "|" + r.Header.Get("X-Api-Key")
		if strings.Contains(auth, "key-a") || strings.Contains(auth, "key-b") {
			t.Errorf("a Mneme key went upstream: %s", auth)
		}
		want := "Bearer sk-server-openai|"
		if r.API == fakellm.APIAnthropic {
			want = "|sk-server-anthropic"
		}
		if auth != want {
			t.Errorf("%s upstream auth %q, want %q", r.Path, auth, want)
		}
	}
}

func TestListenAddressNeedsAuth(t *testing.T) {
	tests := []struct {
		addr           string
		auth, insecure bool
		ok             bool
	}{
		{"127.0.0.1:8787", false, false, true},
		{"[::1]:8787", false, false, true},
		{"localhost:8787", false, false, true},
		{"0.0.0.0:8787", false, false, false},
		{":8787", false, false, false},
		{"10.1.2.3:8787", false, false, false},
		{"0.0.0.0:8787", true, false, true},
		{"0.0.0.0:8787", false, true, true},
	}
	for _, tc := range tests {
		err := server.CheckAddr(tc.addr, tc.auth, tc.insecure)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAddr(%q, auth=%v, insecure=%v) = %v", tc.addr, tc.auth, tc.insecure, err)
		}
		if err != nil && !errors.Is(err, server.ErrInsecureAddr) {
			t.Errorf("%q: %v is not ErrInsecureAddr", tc.addr, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	keys, err := server.ParseKeyFile(strings.NewReader("# comment\nk1 tenantA\n\n  k2   tenantB  \n"))
	if err != nil || len(keys) != 2 || keys["k1"] != "tenantA" || keys["k2"] != "tenantB" {
		t.Errorf("file: %v %v", keys, err)
	}
	if _, err := server.ParseKeyFile(strings.NewReader("k1\n")); err == nil {
		t.Error("a line without tenant was accepted")
	}
	if _, err := server.ParseKeyFile(strings.NewReader("k1 a\nk1 b\n")); err == nil {
		t.Error("a duplicate key was accepted")
	}
	keys, err = server.ParseKeyList("key1=tenantA, key2=tenantB")
	if err != nil || len(keys) != 2 || keys["key2"] != "tenantB" {
		t.Errorf("list: %v %v", keys, err)
	}
	if _, err := server.ParseKeyList("key1"); err == nil {
		t.Error("a pair without = was accepted")
	}
}

// TestThreadIdentityAndForks, with the proxy's caches at their default
// size, bounded to next to nothing (every entry turns a generation), and
// off (proxy.Config.CacheBytes < 0): the caches change no answer.
func TestThreadIdentityAndForks(t *testing.T) {
	for _, n := range []int64{0, 1, -1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			checkThreadIdentity(t, startServer(t, harnessOpts{pxConfig: func(c *proxy.Config) { c.CacheBytes = n }}))
		})
	}
}

func checkThreadIdentity(t *testing.T, h *harness) {
	url := h.url + "/v1/chat/completions"
	send := func(hdr map[string]string, msgs ...string) string {
		t.Helper()
		status, rh, body := post(t, url, chatBody(msgs...), hdr)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		return rh.Get(proxy.HeaderThread)
	}
	// Without a header: a derived id, the same for every request of a run.
	a := send(nil, "system", "S", "user", "goal")
	b := send(nil, "system", "S", "user", "goal", "assistant", "ok: goal", "user", "next")
	if a != b || !strings.HasPrefix(a, "t-") {
		t.Fatalf("derived ids %q, %q", a, b)
	}
	other := send(nil, "system", "S", "user", "another goal")
	if other == a {
		t.Fatal("two runs share a derived id")
	}
	orig := []string{"system:S", "user:goal", "assistant:ok: goal", "user:next", "assistant:ok: next"}
	equalLines(t, "run", summary(h.messages(t, "default", a)), orig)

	// An edited history forks; the original is untouched; the branch's
	// next request finds its fork again.
	f1 := send(nil, "system", "S", "user", "goal", "assistant", "ok: goal", "user", "edited")
	if f1 == a || !strings.HasPrefix(f1, a+"~") {
		t.Fatalf("fork id %q of %q", f1, a)
	}
	f2 := send(nil, "system", "S", "user", "goal", "assistant", "ok: goal", "user", "edited", "assistant", "ok: edited", "user", "more")
	if f2 != f1 {
		t.Fatalf("the branch went to %q, not its fork %q", f2, f1)
	}
	equalLines(t, "original", summary(h.messages(t, "default", a)), orig)
	equalLines(t, "fork", summary(h.messages(t, "default", f1)), []string{
		"system:S", "user:goal", "assistant:ok: goal", "user:edited", "assistant:ok: edited", "user:more", "assistant:ok: more",
	})

	// A header names the thread; both spellings work; append mode appends.
	x := send(map[string]string{"Mneme-Thread": "named"}, "user", "one")
	if x != "named" {
		t.Fatalf("thread %q", x)
	}
	send(map[string]string{proxy.HeaderThread: "named", proxy.HeaderMode: "append"}, "user", "two")
	equalLines(t, "append mode", summary(h.messages(t, "default", "named")), []string{"user:one", "assistant:ok: one", "user:two", "assistant:ok: two"})
	if status, _, _ := post(t, url, chatBody("user", "x"), map[string]string{proxy.HeaderMode: "sideways"}); status != 400 {
		t.Errorf("bad mode: %d", status)
	}
}

func TestPassThrough(t *testing.T) {
	h := startServer(t, harnessOpts{})
	// Unknown fields and their order reach the upstream as they were sent.
	body := `{"model":"gpt-4o-mini","temperature":0.25,"x_vendor":{"deep":[1,2,{"k":"v"}]},"messages":[{"role":"user","content":"hi"}],"metadata":{"run":"42"}}`
	if status, _, b := post(t, h.url+"/v1/chat/completions", body, nil); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	got := string(h.llm.Requests()[0].Body)
	for _, want := range []string{`"temperature":0.25`, `"x_vendor":{"deep":[1,2,{"k":"v"}]}`, `"metadata":{"run":"42"}`} {
		if !strings.Contains(got, want) {
			t.Errorf("upstream body lacks %s: %s", want, got)
		}
	}
	if i, j := strings.Index(got, "temperature"), strings.Index(got, "metadata"); i > j {
		t.Errorf("field order changed: %s", got)
	}
	// Other /v1/* routes are forwarded as they are.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/models", ""},
		{"POST", "/v1/embeddings", `{"model":"text-embedding-3-small","input":"hello"}`},
		{"POST", "/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`},
	} {
		req, _ := http.NewRequest(r.method, h.url+r.path, strings.NewReader(r.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s %s: %d", r.method, r.path, resp.StatusCode)
		}
	}
	if n := len(h.llm.Requests()); n != 4 {
		t.Errorf("upstream got %d requests, want 4", n)
	}
}

func TestBrokenStreamIsRecordedPartial(t *testing.T) {
	for _, api := range []proxy.API{proxy.OpenAI, proxy.Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			h := startServer(t, harnessOpts{})
			h.llm.Enqueue(fakellm.Reply{Text: "This answer will break in the middle of its words", CutAfter: 4})
			path, body := "/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"go"}]}`
			if api == proxy.Anthropic {
				path, body = "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"go"}]}`
			}
			status, _, _ := post(t, h.url+path, body, map[string]string{proxy.HeaderThread: "cut"})
			if status != 200 {
				t.Fatalf("status %d", status)
			}
			got := summary(h.messages(t, "default", "cut"))
			if len(got) != 2 || !strings.HasSuffix(got[1], "(partial)") || !strings.HasPrefix(got[1], "assistant:This") {
				t.Errorf("log %v: want the user message and a partial reply", got)
			}
		})
	}
}

func TestGracefulShutdownFinishesStreams(t *testing.T) {
	h := startServer(t, harnessOpts{})
	h.llm.Enqueue(fakellm.Reply{Text: strings.Repeat("slow words ", 20), ChunkDelay: 20 * time.Millisecond})
	done := make(chan []byte, 1)
	go func() {
		_, _, b := post(t, h.url+"/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"go"}]}`, map[string]string{proxy.HeaderThread: "slow"})
		done <- b
	}()
	for h.llm.Pending() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	h.stop() // shut down while the stream is in flight
	<-h.done
	h.stop = nil
	b := <-done
	if !strings.Contains(string(b), "[DONE]") {
		t.Errorf("the stream was cut by the shutdown: %s", b)
	}
	got := summary(h.messages(t, "default", "slow"))
	if len(got) != 2 || strings.Contains(got[1], "partial") {
		t.Errorf("log after shutdown %v", got)
	}
	h.m.Close()
	h.st.Close()
	h.llm.Close()
}

func TestResponseHeaders(t *testing.T) {
	h := startServer(t, harnessOpts{})
	_, hdr, _ := post(t, h.url+"/v1/chat/completions", chatBody("system", "S", "user", "hello"), nil)
	for _, k := range []string{proxy.HeaderThread, proxy.HeaderWindow, proxy.HeaderThreadTok, proxy.HeaderCompacted} {
		if hdr.Get(k) == "" {
			t.Errorf("no %s header", k)
		}
	}
	if hdr.Get(proxy.HeaderCompacted) != "false" {
		t.Errorf("compacted %q on a first request", hdr.Get(proxy.HeaderCompacted))
	}
	var n int
	if _, err := fmt.Sscan(hdr.Get(proxy.HeaderWindow), &n); err != nil || n <= 0 {
		t.Errorf("window tokens %q", hdr.Get(proxy.HeaderWindow))
	}
	_ = context.Background
}

// TestPooledUpstreamBodies: the upstream bodies the proxy writes into
// pooled buffers reach the upstream whole and each its own, with many
// clients at once (a buffer reused while the transport still read it
// would mix two requests' messages or break the JSON).
func TestPooledUpstreamBodies(t *testing.T) {
	h := startServer(t, harnessOpts{})
	const clients, turns = 12, 8
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pad := strings.Repeat(fmt.Sprintf("client %d. ", c), 50*(c+1))
			msgs := []string{"system", "S", "user", pad + "start"}
			for turn := range turns {
				status, _, b := post(t, h.url+"/v1/chat/completions", chatBody(msgs...), map[string]string{proxy.HeaderThread: fmt.Sprintf("pool-%d", c)})
				if status != 200 {
					t.Errorf("client %d turn %d: %d %s", c, turn, status, b)
					return
				}
				msgs = append(msgs, "assistant", "ok", "user", fmt.Sprintf("client %d. turn %d", c, turn))
			}
		}()
	}
	wg.Wait()
	reqs := h.llm.Requests()
	if len(reqs) != clients*turns {
		t.Fatalf("upstream got %d requests, want %d", len(reqs), clients*turns)
	}
	marker := regexp.MustCompile(`client (\d+)\.`)
	for i, r := range reqs {
		if !json.Valid(r.Body) {
			t.Fatalf("upstream body %d is not JSON: %.200q", i, r.Body)
		}
		seen := map[string]bool{}
		for _, m := range marker.FindAllSubmatch(r.Body, -1) {
			seen[string(m[1])] = true
		}
		if len(seen) != 1 {
			t.Fatalf("upstream body %d carries the messages of clients %v", i, seen)
		}
	}
}

// TestPooledBodyRedirect: an upstream that redirects (307) gets the same
// body at the new address: the client takes it again from the pooled
// buffer (GetBody) while the exchange still holds it.
func TestPooledBodyRedirect(t *testing.T) {
	llm := fakellm.Start()
	defer llm.Close()
	var mu sync.Mutex
	var first [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		first = append(first, b)
		mu.Unlock()
		http.Redirect(w, r, llm.URL()+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer up.Close()
	h := startServer(t, harnessOpts{pxConfig: func(c *proxy.Config) { c.OpenAIUpstream = up.URL }})
	msgs := []string{"user", strings.Repeat("long ", 4000)}
	for turn := range 3 {
		if status, _, b := post(t, h.url+"/v1/chat/completions", chatBody(msgs...), map[string]string{proxy.HeaderThread: "redirected"}); status != 200 {
			t.Fatalf("turn %d: %d %s", turn, status, b)
		}
		msgs = append(msgs, "assistant", "ok", "user", fmt.Sprint("turn ", turn))
	}
	reqs := llm.Requests()
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != 3 || len(first) != 3 {
		t.Fatalf("%d first requests, %d redirected, want 3 and 3", len(first), len(reqs))
	}
	for i := range reqs {
		if !bytes.Equal(first[i], reqs[i].Body) || !json.Valid(first[i]) {
			t.Errorf("request %d: redirected body differs from the first (%d and %d bytes)", i, len(first[i]), len(reqs[i].Body))
		}
	}
}
