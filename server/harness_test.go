package server_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/window"
)

// harness is a real `mneme serve` on a loopback port with a fakellm
// upstream and an in-memory store.
type harness struct {
	llm   *fakellm.Server
	m     *mneme.Engine
	st    store.Store
	url   string
	stop  context.CancelFunc
	done  chan error
	px    *proxy.Proxy
	quiet *slog.Logger
}

type harnessOpts struct {
	dsn      string // a store DSN; default an in-memory store
	keys     map[string]string
	budget   int
	llmOpts  []fakellm.Option
	pxConfig func(*proxy.Config)
	wrap     func(store.Store) store.Store // wraps the store the server is given
}

// testPolicy keeps the budget small so that compaction happens.
func testPolicy(budget int) mneme.Policy {
	p := mneme.DefaultPolicy()
	p.BudgetTokens = budget
	p.ReserveOutputTokens = budget / 16
	p.MinTailTokens = budget / 8
	p.EvictOverTokens = budget / 4
	// The sessions of these tests were sized to be cut (not only masked)
	// under a trigger of 0.75 and a target of 0.40: at the defaults' 0.50
	// masking alone fits them, and the compaction paths they check would
	// not run.
	p.Trigger, p.Target = window.Frac(0.75), window.Frac(0.40)
	return p
}

func startServer(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.budget == 0 {
		o.budget = 16000
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	llm := fakellm.Start(o.llmOpts...)
	var st store.Store = inmem.New()
	if o.dsn != "" {
		var err error
		if st, err = dsn.Open(context.Background(), o.dsn); err != nil {
			t.Fatal(err)
		}
	}
	served := st
	if o.wrap != nil {
		served = o.wrap(st)
	}
	pol := testPolicy(o.budget)
	cfg := proxy.Config{OpenAIUpstream: llm.URL(), AnthropicUpstream: llm.URL()}
	if o.pxConfig != nil {
		o.pxConfig(&cfg)
	}
	srv, err := server.New(context.Background(), server.Config{Addr: "127.0.0.1:0", Keys: o.keys, Store: served, Engine: mneme.Config{Policy: &pol}, Proxy: cfg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m, px := srv.Engine(), srv.Proxy()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{llm: llm, m: m, st: st, url: "http://" + ln.Addr().String(), stop: cancel, done: make(chan error, 1), px: px, quiet: quiet}
	go func() { h.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(h.close)
	return h
}

func (h *harness) close() {
	if h.stop == nil {
		return
	}
	h.stop()
	h.stop = nil
	<-h.done
	h.m.Close()
	h.st.Close()
	h.llm.Close()
}

// messages returns a thread's logged messages.
func (h *harness) messages(t testing.TB, tenant, thread string) []message.Message {
	t.Helper()
	msgs, err := h.m.Thread(tenant, thread).Messages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// threads lists a tenant's thread ids.
func (h *harness) threads(t testing.TB, tenant string) []string {
	t.Helper()
	infos, _, err := h.st.Threads(context.Background(), tenant, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range infos {
		ids = append(ids, in.ID)
	}
	return ids
}

// summary renders logged messages as "role:text|calls" lines for comparison.
func summary(msgs []message.Message) []string {
	var out []string
	for _, m := range msgs {
		var b strings.Builder
		b.WriteString(string(m.Role))
		b.WriteString(":")
		for _, p := range m.Parts {
			switch p.Type {
			case message.Text:
				b.WriteString(p.Text)
			case message.ToolCall:
				b.WriteString("[call " + p.ToolName + " " + p.Arguments + "]")
			case message.ToolResult:
				b.WriteString("[result " + message.Message{Parts: p.Content}.TextOf() + "]")
			}
		}
		if m.Meta[proxy.MetaPartial] == "true" {
			b.WriteString(" (partial)")
		}
		if m.Meta[proxy.MetaRecall] == "true" {
			b.WriteString(" (recall)")
		}
		out = append(out, b.String())
	}
	return out
}

func equalLines(t testing.TB, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// post sends a raw request and returns status, headers and body.
func post(t testing.TB, url, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
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
