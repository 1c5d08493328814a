package server_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store/postgres/pgtest"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

// rig is a whole `mneme serve` (proxy, JSON API, MCP) on a loopback port,
// on a real backend (memory, SQLite file or a fresh PostgreSQL schema),
// with a fakellm upstream: what the reliability and security tests drive.
type rig struct {
	url     string
	backend string
	dsn     string
	sqlite  string // the SQLite file, for the sqlite backend
	m       *mneme.Engine
	st      store.Store
	llm     *fakellm.Server
	px      *proxy.Proxy
	api     *api.API
	srv     *server.Server
	stop    func()
	timeout time.Duration // of do's requests; default a minute
}

type rigOpts struct {
	backend     string // "memory" (default), "sqlite" or "postgres"
	keys        map[string]string
	budget      int
	concurrency int // server.Config.TenantConcurrency
	embedder    bool
	llmOpts     []fakellm.Option
	pxConfig    func(*proxy.Config)
	mConfig     func(c *mneme.Config, llmURL string)
	wrap        func(store.Store) store.Store // what the engine sees of the store
	srvConfig   func(*server.Config)          // last word on the server's config
	logTo       io.Writer                     // the server's logs (JSON); default discarded
}

// backendsUnderTest are the durable backends every matrix runs on.
var backendsUnderTest = []string{"sqlite", "postgres"}

// postgresDSN returns a DSN on a fresh schema of MNEME_TEST_POSTGRES,
// dropped when the test ends. Without the variable the test skips, but
// under CI=true it fails: PostgreSQL tests must run there.
func postgresDSN(t testing.TB) string { return pgtest.DSN(t, "mneme_srv") }

func startRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	if o.budget == 0 {
		o.budget = 16000
	}
	if o.backend == "" {
		o.backend = "memory"
	}
	r := &rig{backend: o.backend}
	switch o.backend {
	case "memory":
		r.dsn = "memory:"
	case "sqlite":
		r.sqlite = filepath.Join(t.TempDir(), "mneme.db")
		r.dsn = "sqlite:" + r.sqlite
	case "postgres":
		r.dsn = postgresDSN(t)
	default:
		t.Fatalf("unknown backend %q", o.backend)
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.logTo != nil {
		quiet = slog.New(slog.NewJSONHandler(o.logTo, nil))
	}
	st, err := dsn.Open(ctx, r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	r.st = st
	r.llm = fakellm.Start(o.llmOpts...)
	pol := testPolicy(o.budget)
	engineStore := st
	if o.wrap != nil {
		engineStore = o.wrap(st)
	}
	cfg := mneme.Config{Policy: &pol}
	if o.embedder {
		cfg.Embedder = &embed.OpenAI{BaseURL: r.llm.URL() + "/v1", EmbeddingModel: "fake-embed"}
	}
	if o.mConfig != nil {
		o.mConfig(&cfg, r.llm.URL())
	}
	pc := proxy.Config{OpenAIUpstream: r.llm.URL(), AnthropicUpstream: r.llm.URL()}
	if o.pxConfig != nil {
		o.pxConfig(&pc)
	}
	scfg := server.Config{Addr: "127.0.0.1:0", Keys: o.keys, Store: engineStore, Engine: cfg, Proxy: pc, Logger: quiet, TenantConcurrency: o.concurrency}
	if o.srvConfig != nil {
		o.srvConfig(&scfg)
	}
	srv, err := server.New(ctx, scfg)
	if err != nil {
		t.Fatal(err)
	}
	r.srv, r.m, r.px, r.api = srv, srv.Engine(), srv.Proxy(), srv.API()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.url = "http://" + ln.Addr().String()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		srv.Close()
		r.st.Close()
		r.llm.Close()
	}
	t.Cleanup(r.stop)
	return r
}

// do sends a request with an optional key and headers; it returns status,
// headers and body.
func (r *rig) do(t testing.TB, method, path, key, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, r.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	timeout := r.timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// snapshot is what a tenant's store holds, for "unchanged" checks: every
// thread with its event count and last seq, and the memory items.
func (r *rig) snapshot(t testing.TB, tenants ...string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, tenant := range tenants {
		cursor := ""
		for {
			infos, next, err := r.st.Threads(ctx, tenant, store.Page{Cursor: cursor, Limit: 500})
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range infos {
				b.WriteString(tenant + "/" + in.ID + " events=" + itoa(in.Events) + " messages=" + itoa(in.Messages) + " tokens=" + itoa(in.Tokens) + "\n")
			}
			if next == "" {
				break
			}
			cursor = next
		}
		items, err := r.st.SearchMemory(ctx, tenant, store.MemoryQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			b.WriteString(tenant + " memory " + strings.Join(it.Namespace, "/") + ":" + it.Key + "=" + string(it.Value) + "\n")
		}
	}
	return b.String()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// messagesOf returns a thread's logged messages.
// branchOf returns the one branch of thread parent.
func (r *rig) branchOf(t testing.TB, tenant, parent string) string {
	t.Helper()
	infos, _, err := r.st.Threads(context.Background(), tenant, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range infos {
		if strings.HasPrefix(in.ID, parent+"~") {
			out = append(out, in.ID)
		}
	}
	if len(out) != 1 {
		t.Fatalf("branches of %s: %q, want one", parent, out)
	}
	return out[0]
}

func (r *rig) messagesOf(t testing.TB, tenant, thread string) []message.Message {
	t.Helper()
	msgs, err := r.m.Thread(tenant, thread).Messages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}
