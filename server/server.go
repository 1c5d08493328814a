// Package server is `mneme serve` as a component: New assembles the engine
// over a store, the proxy (/v1/*), the JSON API (/api/), MCP (/mcp),
// metrics (/metrics), the inspector page (/) and the health check
// (/healthz) behind one auth, one per-tenant limit and one set of
// timeouts; Serve listens and shuts down gracefully (requests in flight
// finish and their replies are recorded before Close closes the engine).
// The CLI and the tests build it the same way.
//
// The package must not import any store backend or know SQL; it uses the
// engine, the proxy, the API and MCP through their public API.
package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/internal/status"
	"github.com/mnemehq/mneme/metrics"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/tenant"
)

// DefaultAddr is where `mneme serve` listens by default: loopback only.
const DefaultAddr = "127.0.0.1:8787"

// Defaults of Config.
const (
	// DefaultShutdownTimeout bounds how long a shutdown waits for requests
	// in flight (long streams included) before it cuts them.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultMaxConns bounds the connections open at once.
	DefaultMaxConns = 2048
	// DefaultIdleTimeout closes a keep-alive connection idle this long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultHeaderTimeout bounds reading a request's headers (and so how
	// long a connection that sends nothing stays open).
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds reading a request's body.
	DefaultBodyTimeout = 60 * time.Second
	// DefaultMCPStreams bounds the MCP event streams one tenant keeps open.
	DefaultMCPStreams = 8
)

// ErrInsecureAddr: a non-loopback address without auth and without Insecure.
var ErrInsecureAddr = errors.New("server: refusing to listen beyond loopback without --auth (pass --insecure to do it anyway)")

// Config configures a Server. Every duration and bound has a default (the
// constants above); zero means the default.
type Config struct {
	// Addr is the listen address (default DefaultAddr).
	Addr string
	// Keys maps API keys to tenants. Empty: no auth, every request belongs
	// to tenant.Default, and Addr must be a loopback address unless
	// Insecure is set.
	Keys     map[string]string
	Insecure bool

	// Store is where the engine keeps everything; required. The caller
	// opens it and closes it after Server.Close.
	Store store.Store
	// Engine configures the engine; New sets its Store (Store behind the
	// metrics' timing) and its Logger, and chains its callbacks after the
	// metrics and the usage history.
	Engine mneme.Config
	// Proxy configures /v1/*; New sets its Engine and Logger, and its
	// Client when nil (proxy.NewTransport, timed by the metrics).
	Proxy proxy.Config

	// ShutdownTimeout: see DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// TenantConcurrency bounds the requests one tenant has in flight on the
	// authenticated routes (429 with Retry-After beyond). 0:
	// DefaultTenantConcurrency; negative: no limit.
	TenantConcurrency int
	// MCPStreams bounds the MCP event streams (GET /mcp) one tenant keeps
	// open; they do not count toward TenantConcurrency.
	MCPStreams int
	// MaxConns bounds the open connections: a connection past it closes the
	// longest-idle one, or is closed itself when none is idle.
	MaxConns int
	// HeaderTimeout, BodyTimeout and IdleTimeout bound reading a request's
	// headers, reading its body, and a keep-alive connection's idleness. A
	// body is read whole before its request takes a tenant's slot, so a
	// slow body holds none. Writes are bounded by the proxy's upstream
	// timeout plus a minute: the longest answer is a stream that long.
	HeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Server is `mneme serve`. Register extra routes with Handle before Serve;
// Close it after Serve returns.
type Server struct {
	cfg  Config
	mux  *http.ServeMux
	keys map[[32]byte]string
	log  *slog.Logger

	m       *mneme.Engine
	px      *proxy.Proxy
	api     *api.API
	metrics *metrics.Metrics

	limiter *tenantLimiter // nil: no concurrency limit
	streams *tenantLimiter
	maxBody int64
}

// New checks cfg, opens the engine on cfg.Store and assembles the routes.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: Config.Store is required")
	}
	cfg.Addr = cmp.Or(cfg.Addr, DefaultAddr)
	cfg.ShutdownTimeout = cmp.Or(max(cfg.ShutdownTimeout, 0), DefaultShutdownTimeout)
	cfg.MaxConns = cmp.Or(max(cfg.MaxConns, 0), DefaultMaxConns)
	cfg.HeaderTimeout = cmp.Or(max(cfg.HeaderTimeout, 0), DefaultHeaderTimeout)
	cfg.BodyTimeout = cmp.Or(max(cfg.BodyTimeout, 0), DefaultBodyTimeout)
	cfg.IdleTimeout = cmp.Or(max(cfg.IdleTimeout, 0), DefaultIdleTimeout)
	cfg.MCPStreams = cmp.Or(max(cfg.MCPStreams, 0), DefaultMCPStreams)
	cfg.Proxy.UpstreamTimeout = cmp.Or(max(cfg.Proxy.UpstreamTimeout, 0), proxy.DefaultUpstreamTimeout)
	cfg.Proxy.MaxBodyBytes = cmp.Or(max(cfg.Proxy.MaxBodyBytes, 0), proxy.DefaultMaxBodyBytes)
	if err := CheckAddr(cfg.Addr, len(cfg.Keys) > 0, cfg.Insecure); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), log: cmp.Or(cfg.Logger, slog.Default()), metrics: metrics.New(), maxBody: cfg.Proxy.MaxBodyBytes}
	if len(cfg.Keys) > 0 {
		s.keys = make(map[[32]byte]string, len(cfg.Keys))
		for k, t := range cfg.Keys {
			s.keys[sha256.Sum256([]byte(k))] = t
		}
	}
	switch {
	case cfg.TenantConcurrency == 0:
		s.limiter = newTenantLimiter(DefaultTenantConcurrency)
	case cfg.TenantConcurrency > 0:
		s.limiter = newTenantLimiter(cfg.TenantConcurrency)
	}
	s.streams = newTenantLimiter(cfg.MCPStreams)

	history := api.NewHistory(0, 0)
	ecfg := cfg.Engine
	ecfg.Store, ecfg.DSN = s.metrics.Store(cfg.Store), ""
	ecfg.Logger = s.log
	next := ecfg
	record := next.OnUsage
	next.OnUsage = func(tenant, thread string, u mneme.Usage) {
		history.Record(tenant, thread, u)
		if record != nil {
			record(tenant, thread, u)
		}
	}
	ecfg.OnUsage, ecfg.OnCompact = s.metrics.Hooks(next)
	var err error
	if s.m, err = mneme.Open(ctx, ecfg); err != nil {
		return nil, err
	}
	pcfg := cfg.Proxy
	pcfg.Engine, pcfg.Logger = s.m, s.log
	if pcfg.Client == nil {
		pcfg.Client = &http.Client{Transport: s.metrics.Transport(proxy.NewTransport(pcfg.UpstreamTimeout))}
	}
	if s.px, err = proxy.New(pcfg); err != nil {
		s.m.Close()
		return nil, err
	}
	if s.api, err = api.New(api.Config{Engine: s.m, History: history, Logger: s.log}); err != nil {
		s.m.Close()
		return nil, err
	}
	if err := s.routes(); err != nil {
		s.m.Close()
		return nil, err
	}
	return s, nil
}

// Engine returns the engine; Proxy the /v1/* proxy; API the JSON API.
func (s *Server) Engine() *mneme.Engine { return s.m }
func (s *Server) Proxy() *proxy.Proxy   { return s.px }
func (s *Server) API() *api.API         { return s.api }

// Close closes the engine (its background jobs end); call it after Serve
// returned, then close the store.
func (s *Server) Close() error { return s.m.Close() }

// CheckAddr refuses a listen address beyond loopback when there is no auth,
// unless insecure.
func CheckAddr(addr string, auth, insecure bool) error {
	if auth || insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("server: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInsecureAddr, addr)
}

// Handle registers h for pattern (http.ServeMux syntax) behind the
// authentication, the body timeout and the per-tenant concurrency limit:
// h finds the caller's tenant with tenant.Of.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.handle(pattern, h, bodyStream)
}

// HandlePublic registers h without authentication (health checks, static
// assets of the inspector page).
func (s *Server) HandlePublic(pattern string, h http.Handler) {
	s.mux.Handle(pattern, s.withRequestID(h))
}

func (s *Server) handle(pattern string, h http.Handler, body bodyMode) {
	s.mux.Handle(pattern, s.withRequestID(s.authenticate(s.limit(h, body))))
}

// Handler returns the server's routes, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.mux }

// withRequestID gives every request an id: in its context (for the logs
// and the 5xx bodies, see internal/status) and in the X-Request-Id header
// of the answer.
func (s *Server) withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, id := status.WithRequestID(r.Context())
		w.Header().Set(status.HeaderRequestID, id)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// authenticate maps the request's key to its tenant, or answers 401 in the
// shape of the API the request speaks. The client's Mneme key is removed so
// that it never goes upstream.
func (s *Server) authenticate(h http.Handler) http.Handler {
	if s.keys == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key")
		if a := r.Header.Get("Authorization"); key == "" && len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			key = strings.TrimSpace(a[7:])
		}
		t, ok := s.keys[sha256.Sum256([]byte(key))]
		if key == "" || !ok {
			writeError(w, r, http.StatusUnauthorized, "unauthorized", "mneme: invalid or missing API key (send it as Authorization: Bearer KEY or x-api-key: KEY)")
			return
		}
		r = r.Clone(tenant.With(r.Context(), t))
		r.Header.Del("Authorization")
		r.Header.Del("X-Api-Key")
		h.ServeHTTP(w, r)
	})
}

// ListenAndServe listens on the configured address and serves until ctx
// ends; see Serve.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting, lets the requests in flight finish (up to ShutdownTimeout) and
// waits for the proxy to record their replies. The caller then calls Close.
// It returns nil after a shutdown asked by ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	conns := newConnLimiter(ln, s.cfg.MaxConns)
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		WriteTimeout:      s.cfg.Proxy.UpstreamTimeout + time.Minute,
		ConnState:         conns.track,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(conns) }()
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down: waiting for requests in flight", "timeout", s.cfg.ShutdownTimeout)
	shutCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	if err != nil {
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	s.px.Wait()
	if err != nil {
		return fmt.Errorf("server: shutdown: %w", err)
	}
	return nil
}
