// Package server is the HTTP server of `mneme serve`: it listens, checks
// API keys and maps them to tenants, routes /v1/* to the proxy, and shuts
// down gracefully (in-flight requests finish and their replies are
// recorded before the caller closes the store).
//
// The JSON API (/api/), metrics (/metrics), MCP (/mcp) and the inspector
// page register on the same mux through Server.Handle (see the extension
// point in routes). The package must not import any store backend or know
// SQL; it imports the proxy and the engine only through their public API.
package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/mnemehq/mneme/proxy"
)

// DefaultAddr is where `mneme serve` listens by default: loopback only.
const DefaultAddr = "127.0.0.1:8787"

// DefaultShutdownTimeout bounds how long a shutdown waits for requests in
// flight (long streams included) before it cuts them.
const DefaultShutdownTimeout = 30 * time.Second

// ErrInsecureAddr: a non-loopback address without auth and without Insecure.
var ErrInsecureAddr = errors.New("server: refusing to listen beyond loopback without --auth (pass --insecure to do it anyway)")

// Config configures a Server.
type Config struct {
	// Addr is the listen address (default DefaultAddr).
	Addr string
	// Keys maps API keys to tenants. Empty: no auth, every request belongs
	// to proxy.DefaultTenant, and Addr must be a loopback address unless
	// Insecure is set.
	Keys     map[string]string
	Insecure bool
	// Proxy serves /v1/*; required.
	Proxy *proxy.Proxy
	// ShutdownTimeout: see DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// TenantConcurrency bounds the requests one tenant has in flight on the
	// authenticated routes (429 with Retry-After beyond). 0:
	// DefaultTenantConcurrency; negative: no limit.
	TenantConcurrency int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Server is the HTTP server. Register extra routes with Handle before
// calling Serve.
type Server struct {
	cfg  Config
	mux  *http.ServeMux
	keys map[[32]byte]string
	log  *slog.Logger

	limiter *tenantLimiter // nil: no concurrency limit
}

// New checks cfg and returns a Server with the proxy's routes registered.
func New(cfg Config) (*Server, error) {
	if cfg.Proxy == nil {
		return nil, errors.New("server: Config.Proxy is required")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if err := CheckAddr(cfg.Addr, len(cfg.Keys) > 0, cfg.Insecure); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
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
	s.routes()
	return s, nil
}

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

// Handle registers h for pattern (http.ServeMux syntax) behind the same
// authentication and per-tenant concurrency limit as the proxy: h finds the
// caller's tenant with Tenant.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, s.authenticate(s.limit(h)))
}

// HandlePublic registers h without authentication (health checks, static
// assets of the inspector page).
func (s *Server) HandlePublic(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// Handler returns the server's routes, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.mux }

// Tenant returns the tenant a request acts for (set by the auth check).
func Tenant(ctx context.Context) string { return proxy.TenantOf(ctx) }

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
		tenant, ok := s.keys[sha256.Sum256([]byte(key))]
		if key == "" || !ok {
			proxy.WriteError(w, r, http.StatusUnauthorized, "mneme: invalid or missing API key (send it as Authorization: Bearer KEY or x-api-key: KEY)")
			return
		}
		r = r.Clone(proxy.WithTenant(r.Context(), tenant))
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
// waits for the proxy to record their replies. The caller then closes the
// engine (which closes the store). It returns nil after a shutdown asked
// by ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
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
	s.cfg.Proxy.Wait()
	if err != nil {
		return fmt.Errorf("server: shutdown: %w", err)
	}
	return nil
}
