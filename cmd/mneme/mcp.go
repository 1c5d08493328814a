package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/inspector"
	"github.com/mnemehq/mneme/mcpserver"
	"github.com/mnemehq/mneme/metrics"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

func init() { extraCommands = append(extraCommands, mcpCmd) }

func mcpCmd() *cobra.Command {
	var f storeFlags
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve one tenant's archive and long-term memory to an MCP client over stdio",
		Long: `Serve the Model Context Protocol on stdin and stdout for one tenant, with
the tools search, read, remember, recall_memory, list_threads and
thread_summary. Add it to an MCP client (Claude Code, Cursor, ...) as a
command, e.g.:

  {"mcpServers": {"mneme": {"command": "mneme", "args": ["mcp", "--store", "sqlite:/path/mneme.db", "--tenant", "default"]}}}

The same tools are served over streamable HTTP at /mcp by mneme serve.
Logs go to stderr: stdout carries the protocol.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			st, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			m, err := mneme.Open(cmd.Context(), mneme.Config{Store: st, Logger: logger})
			if err != nil {
				return err
			}
			defer m.Close()
			return mcpserver.ServeStdio(cmd.Context(), mcpserver.Config{Engine: m}, f.tenant)
		},
	}
	f.add(c)
	return c
}

// ---- what `mneme serve` adds to the proxy (issue 9) ---------------------
//
// observability wires the JSON API, the inspector page, the metrics and
// MCP into `mneme serve`; serve.go calls it in a marked section: engine
// before mneme.Open (store timing, usage and compaction callbacks),
// upstreamClient for the proxy (upstream latency), mount after server.New.

type observability struct {
	metrics *metrics.Metrics
	history *api.History
	store   store.Store // opened by engine, closed by close
}

func newObservability() *observability {
	return &observability{metrics: metrics.New(), history: api.NewHistory(0, 0)}
}

// engine opens cfg's store behind the metrics' timing wrapper and chains
// the metrics and the usage history onto cfg's callbacks.
func (o *observability) engine(ctx context.Context, cfg *mneme.Config) error {
	if cfg.Store == nil {
		d := cfg.DSN
		if d == "" {
			d = mneme.DefaultDSN
		}
		st, err := dsn.Open(ctx, d)
		if err != nil {
			return err
		}
		o.store = st
		cfg.Store = o.metrics.Store(st)
	}
	next := *cfg
	record := next.OnUsage
	next.OnUsage = func(tenant, thread string, u mneme.Usage) {
		o.history.Record(tenant, thread, u)
		if record != nil {
			record(tenant, thread, u)
		}
	}
	cfg.OnUsage, cfg.OnCompact = o.metrics.Hooks(next)
	return nil
}

// close closes the store engine opened (after the Engine is closed).
func (o *observability) close() {
	if o.store != nil {
		o.store.Close()
	}
}

// upstreamClient is the proxy's default client with its transport timed.
func (o *observability) upstreamClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.ResponseHeaderTimeout = timeout
	return &http.Client{Transport: o.metrics.Transport(t)}
}

// mount registers /api/, /mcp, /metrics, the inspector at / and the
// request metrics of the proxy's two model routes.
func (o *observability) mount(srv *server.Server, m *mneme.Engine, px *proxy.Proxy, logger *slog.Logger) error {
	a, err := api.New(api.Config{Engine: m, History: o.history, Logger: logger})
	if err != nil {
		return err
	}
	mh, err := mcpserver.Handler(mcpserver.Config{Engine: m, API: a}, server.Tenant)
	if err != nil {
		return err
	}
	o.metrics.SetRunningJobs(m.RunningJobs)
	mw := o.metrics.Middleware
	insp := inspector.Handler()
	srv.Handle("/api/", mw("", a)) // the route label is the API's own pattern
	srv.Handle("/mcp", mw("/mcp", mh))
	srv.HandlePublic("GET /metrics", mw("GET /metrics", o.metrics.Handler()))
	srv.HandlePublic("GET /{$}", mw("GET /", insp))
	srv.HandlePublic("GET "+inspector.Prefix, mw("GET "+inspector.Prefix, insp))
	// More specific than the proxy's "/v1/": the model routes get counted.
	for _, p := range []string{"POST /v1/chat/completions", "POST /v1/messages"} {
		srv.Handle(p, mw(p, px.Handler()))
	}
	return nil
}

// logHandler returns the slog handler --log-format asks for.
func logHandler(w io.Writer, format string, level slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
