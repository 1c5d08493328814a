package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/mnemehq/mneme/inspector"
	"github.com/mnemehq/mneme/mcpserver"
)

// routes registers what the server serves. Every route is counted by the
// request metrics under its pattern.
func (s *Server) routes() error {
	mw := s.metrics.Middleware
	// The model APIs through Mneme; every other /v1/* path is forwarded
	// upstream as it is (its body streamed, not stored).
	s.Handle("/v1/", mw("", s.px.Handler()))
	for _, p := range []string{"POST /v1/chat/completions", "POST /v1/messages", "POST /v1/responses"} {
		s.handle(p, mw(p, s.px.Handler()), bodyStored)
	}
	s.handle("/api/", mw("", s.api), bodyStored) // the route label is the API's own pattern
	mh, err := mcpserver.Handler(mcpserver.Config{Engine: s.m, API: s.api})
	if err != nil {
		return err
	}
	s.handle("/mcp", mw("/mcp", mh), bodyStored)
	s.metrics.SetRunningJobs(s.m.RunningJobs)
	s.HandlePublic("GET /metrics", mw("GET /metrics", s.metrics.Handler()))
	insp := inspector.Handler()
	s.HandlePublic("GET /{$}", mw("GET /", insp))
	s.HandlePublic("GET "+inspector.Prefix, mw("GET "+inspector.Prefix, insp))
	s.HandlePublic("GET /healthz", mw("GET /healthz", http.HandlerFunc(s.health)))
	return nil
}

// health answers 200 "ok" while the store can take writes, 503 otherwise
// (its database file removed or replaced, its database unreachable): a load
// balancer then stops sending traffic here.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.m.Health(r.Context()); err != nil {
		s.log.Error("health check failed", "err", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "unavailable: the store cannot take writes\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// ParseKeyFile reads an auth file: one "KEY TENANT" pair a line; blank
// lines and lines starting with # are skipped.
func ParseKeyFile(r io.Reader) (map[string]string, error) {
	keys := map[string]string{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("auth file line %d: want \"KEY TENANT\"", n)
		}
		if err := addKey(keys, f[0], f[1]); err != nil {
			return nil, fmt.Errorf("auth file line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	return keys, nil
}

// ParseKeyList reads MNEME_AUTH_KEYS: "key1=tenantA,key2=tenantB".
func ParseKeyList(s string) (map[string]string, error) {
	keys := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, t, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("auth keys: %q: want key=tenant", pair)
		}
		if err := addKey(keys, strings.TrimSpace(k), strings.TrimSpace(t)); err != nil {
			return nil, fmt.Errorf("auth keys: %w", err)
		}
	}
	return keys, nil
}

func addKey(keys map[string]string, k, t string) error {
	if k == "" || t == "" {
		return fmt.Errorf("empty key or tenant")
	}
	if len(t) > 256 {
		return fmt.Errorf("tenant longer than 256 bytes")
	}
	if _, dup := keys[k]; dup {
		return fmt.Errorf("key listed twice")
	}
	keys[k] = t
	return nil
}
