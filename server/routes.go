package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// routes registers what the server serves.
func (s *Server) routes() {
	// The model APIs: chat completions and messages through Mneme, every
	// other /v1/* path forwarded upstream as it is.
	s.Handle("/v1/", s.cfg.Proxy.Handler())
	s.HandlePublic("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	}))

	// ---- Extension point ------------------------------------------------
	// The JSON API (/api/), Prometheus metrics (/metrics), MCP over
	// streamable HTTP (/mcp) and the inspector page (/) are added by their
	// own packages, from the code that builds the Server (cmd/mneme/serve.go,
	// see serveExtensions there), with:
	//
	//	srv.Handle("/api/", api.Handler(m))          // behind auth; server.Tenant(ctx)
	//	srv.HandlePublic("GET /metrics", promhttp.Handler())
	//	srv.Handle("/mcp", mcpserver.Handler(m))
	//	srv.HandlePublic("GET /{$}", inspector.Handler())
	//
	// Nothing else in this package needs to change.
	// ---------------------------------------------------------------------
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
