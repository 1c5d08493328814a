package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	tenantpkg "github.com/mnemehq/mneme/tenant"
)

// The fuzz targets drive the server's whole handler chain (auth, limits,
// proxy, JSON API) in process: the fake upstream is called through an
// in-memory transport, so an iteration costs no socket.

// handlerTransport serves upstream requests with a handler, in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// fuzzEnv is one server for a fuzz worker. Every iteration acts as a
// tenant of its own (set in the request's context, as the server's auth
// would), so that "the store is unchanged" is a check of that tenant alone
// and costs the same at the millionth iteration as at the first.
type fuzzEnv struct {
	h    http.Handler
	st   store.Store
	m    *mneme.Engine
	next atomic.Int64
}

var (
	fuzzOnce sync.Once
	fuzzSrv  *fuzzEnv
)

func fuzzServer(t testing.TB) *fuzzEnv {
	fuzzOnce.Do(func() {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		llm := fakellm.New()
		st := inmem.New()
		pol := testPolicy(4000)
		srv, err := server.New(context.Background(), server.Config{Addr: "127.0.0.1:0", Store: st, Logger: quiet, Engine: mneme.Config{Policy: &pol},
			Proxy: proxy.Config{OpenAIUpstream: "http://upstream", AnthropicUpstream: "http://upstream",
				Client: &http.Client{Transport: handlerTransport{llm.Handler()}}, MaxBodyBytes: 1 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		m := srv.Engine()
		fuzzSrv = &fuzzEnv{h: srv.Handler(), st: st, m: m}
	})
	return fuzzSrv
}

// tenant returns a fresh tenant, seeded with a thread "seed" of two
// messages and a memory item a/seed when seed is set.
func (e *fuzzEnv) tenant(t *testing.T, seed bool) string {
	tenant := "fz-" + itoa(e.next.Add(1))
	if !seed {
		return tenant
	}
	ctx := context.Background()
	u, a := message.NewText(message.User, "seed the store with INV-4401"), message.NewText(message.Assistant, "ok")
	if _, err := e.st.Append(ctx, tenant, "seed", 0, []store.Event{{Kind: store.KindMessage, Message: &u}, {Kind: store.KindMessage, Message: &a}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutMemory(ctx, tenant, store.Memory{Namespace: []string{"a"}, Key: "seed", Value: json.RawMessage(`"seed"`)}); err != nil {
		t.Fatal(err)
	}
	return tenant
}

type fuzzResult struct {
	status int
	hdr    http.Header
	body   []byte
}

func (e *fuzzEnv) serve(tenant, method, target string, body []byte, hdr ...string) (fuzzResult, error) {
	req, err := http.NewRequestWithContext(tenantpkg.With(context.Background(), tenant), method, "http://mneme"+target, bytes.NewReader(body))
	if err != nil {
		return fuzzResult{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return fuzzResult{rec.Code, rec.Header(), rec.Body.Bytes()}, nil
}

// fingerprint is the store's state for "unchanged" checks: the default
// tenant's threads with their event counts, and its memory items.
func (e *fuzzEnv) fingerprint(t *testing.T, tenant string) string {
	ctx := context.Background()
	var b strings.Builder
	infos, _, err := e.st.Threads(ctx, tenant, store.Page{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		b.WriteString(in.ID + "=" + itoa(in.Events) + "\n")
	}
	items, err := e.st.SearchMemory(ctx, tenant, store.MemoryQuery{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		b.WriteString(strings.Join(it.Namespace, "/") + ":" + it.Key + "=" + string(it.Value) + "@" + it.Updated.String() + "\n")
	}
	return b.String()
}

// fuzzModelRoute checks one request to a model route: never a 5xx, an
// error in the API's shape, and a request refused before the engine (no
// X-Mneme-Thread on the answer) leaves the store as it was, except a
// budget error, which keeps the user's messages by design (I1).
func fuzzModelRoute(t *testing.T, path string, body []byte, thread string) {
	e := fuzzServer(t)
	tenant := e.tenant(t, false)
	hdr := []string{}
	if thread != "" {
		hdr = append(hdr, proxy.HeaderThread, thread)
	}
	res, err := e.serve(tenant, "POST", path, body, hdr...)
	if err != nil {
		return // not a request (a thread header that is no header)
	}
	if res.status >= 500 {
		t.Fatalf("status %d for %q: %.500s", res.status, body, res.body)
	}
	if res.status < 400 {
		return
	}
	api := proxy.OpenAI
	if path == "/v1/messages" {
		api = proxy.Anthropic
	}
	msg := fuzzErrorShape(t, api, res.body)
	if res.hdr.Get(proxy.HeaderThread) == "" && !strings.HasPrefix(msg, "budget") {
		if after := e.fingerprint(t, tenant); after != "" {
			t.Fatalf("a refused request (%d %s) changed the store: %s", res.status, msg, after)
		}
	}
}

func fuzzErrorShape(t *testing.T, api proxy.API, body []byte) string {
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Error.Message == "" || v.Error.Type == "" || api == proxy.Anthropic && v.Type != "error" {
		t.Fatalf("an error not in the %s shape: %.500s", api, body)
	}
	return v.Error.Message
}

// modelSeeds are the bad-input cases plus valid requests to mutate.
func modelSeeds(f *testing.F, prefix string) {
	for _, c := range badInputs() {
		if strings.HasPrefix(c.path, prefix) && len(c.body) < 1<<16 {
			f.Add([]byte(c.body), "fuzz")
		}
	}
}

func FuzzOpenAIChat(f *testing.F) {
	modelSeeds(f, "/v1/chat/completions")
	f.Add([]byte(chatBody("system", "s", "user", "hello")), "")
	f.Add([]byte(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`), "fuzz")
	f.Add([]byte(`{"model":"gpt-4o-mini","tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}]}`), "fuzz")
	f.Fuzz(func(t *testing.T, body []byte, thread string) {
		fuzzModelRoute(t, "/v1/chat/completions", body, thread)
	})
}

func FuzzAnthropicMessages(f *testing.F) {
	modelSeeds(f, "/v1/messages")
	f.Add([]byte(anthropicBody("s", "user", "hello")), "")
	f.Add([]byte(`{"model":"claude-sonnet-4-5","max_tokens":50,"stream":true,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"sig"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}],"is_error":true}]}]}`), "fuzz")
	f.Fuzz(func(t *testing.T, body []byte, thread string) {
		fuzzModelRoute(t, "/v1/messages", body, thread)
	})
}

// apiFuzzRoutes are the JSON API's routes as templates: {id} and {ref}
// take the fuzzed path value.
var apiFuzzRoutes = []struct{ method, path string }{
	{"GET", "/api/threads"},
	{"GET", "/api/threads/{id}"},
	{"DELETE", "/api/threads/{id}"},
	{"GET", "/api/threads/{id}/window"},
	{"GET", "/api/threads/{id}/events"},
	{"GET", "/api/threads/{id}/usage"},
	{"GET", "/api/threads/{id}/export"},
	{"GET", "/api/threads/{id}/policy"},
	{"PUT", "/api/threads/{id}/policy"},
	{"POST", "/api/threads/{id}/compact"},
	{"GET", "/api/search"},
	{"GET", "/api/read/{ref}"},
	{"GET", "/api/memory"},
	{"GET", "/api/memory/item"},
	{"PUT", "/api/memory/item"},
	{"DELETE", "/api/memory/item"},
	{"DELETE", "/api/memory"},
}

// FuzzAPI: any route of the JSON API with a fuzzed path value, query and
// body: never a 5xx, errors in the API's shape, and a refused request
// leaves the store as it was.
func FuzzAPI(f *testing.F) {
	for i, r := range apiFuzzRoutes {
		f.Add(uint8(i), "seed", "", []byte(nil))
		if r.method == "PUT" {
			f.Add(uint8(i), "seed", "ns=a&key=k", []byte(`{"value":{"x":1},"ttl_seconds":60}`))
			f.Add(uint8(i), "seed", "", []byte(`{"min_tail_turns":3}`))
		}
	}
	f.Add(uint8(10), "", "q=seed&thread=seed&role=user&limit=3", []byte(nil))
	f.Add(uint8(12), "", "ns=a&q=seed&filter=%7B%22x%22%3A1%7D&limit=2", []byte(nil))
	for _, c := range badInputs() {
		if !strings.HasPrefix(c.path, "/api/") || len(c.body) > 1<<16 {
			continue
		}
		p, q, _ := strings.Cut(c.path, "?")
		for i, r := range apiFuzzRoutes {
			if r.method == c.method && strings.HasPrefix(p, strings.Split(r.path, "{")[0]) {
				f.Add(uint8(i), "seed", q, []byte(c.body))
				break
			}
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, value, query string, body []byte) {
		e := fuzzServer(t)
		r := apiFuzzRoutes[int(route)%len(apiFuzzRoutes)]
		if strings.ContainsAny(value, "/?#%") || strings.ContainsAny(query, "#") {
			return // another route, or a URL that is not one
		}
		target := strings.NewReplacer("{id}", value, "{ref}", value).Replace(r.path)
		if query != "" {
			target += "?" + query
		}
		tenant := e.tenant(t, true)
		before := e.fingerprint(t, tenant)
		res, err := e.serve(tenant, r.method, target, body)
		if err != nil {
			return
		}
		if res.status >= 500 {
			t.Fatalf("%s %s: status %d: %.500s", r.method, target, res.status, res.body)
		}
		if res.status < 400 {
			return
		}
		var eb api.ErrorBody
		if err := json.Unmarshal(res.body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Fatalf("%s %s: %d not in the API's error shape: %.500s", r.method, target, res.status, res.body)
		}
		if after := e.fingerprint(t, tenant); after != before {
			t.Fatalf("%s %s: a refused request (%d) changed the store:\n%s\nthen\n%s", r.method, target, res.status, before, after)
		}
	})
}
