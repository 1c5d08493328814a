package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/mcpserver"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/tenant"
)

// DefaultTenantConcurrency bounds the requests one tenant has in flight at
// once when Config.TenantConcurrency is 0.
const DefaultTenantConcurrency = 64

// RetryAfterSeconds is what a 429 of the concurrency limit tells the client
// to wait before it retries.
const RetryAfterSeconds = 1

// tenantLimiter counts each tenant's requests in flight. A tenant over its
// limit is answered 429 before its request reaches any handler, so a
// rejected request never touches the store. The limit is per tenant so that
// one tenant's burst cannot take every worker of the others.
type tenantLimiter struct {
	max int

	mu       sync.Mutex
	inflight map[string]int
}

func newTenantLimiter(max int) *tenantLimiter {
	return &tenantLimiter{max: max, inflight: map[string]int{}}
}

// acquire takes a slot for tenant; false when it has max in flight.
func (l *tenantLimiter) acquire(tenant string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[tenant] >= l.max {
		return false
	}
	l.inflight[tenant]++
	return true
}

func (l *tenantLimiter) release(tenant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[tenant]--; l.inflight[tenant] <= 0 {
		delete(l.inflight, tenant) // the map holds only tenants with work
	}
}

// bodyMode says how a route's request bodies are read before its handler.
type bodyMode int

const (
	// bodyStream: the handler reads the body as it comes (uploads passed
	// upstream); reading it is bounded by BodyTimeout.
	bodyStream bodyMode = iota
	// bodyStored: the body is read whole first (bounded by BodyTimeout and
	// the body limit), before the request takes a slot, and JSON text that
	// no backend can store as sent is refused with 400 (backend.CheckJSONText).
	bodyStored
)

// isMCPStream reports MCP's standalone event stream: a GET of /mcp that
// asks for text/event-stream. It stays open for the session's life and
// does no work of its own, so it is bounded by MCPStreams rather than by
// the tenant's request slots.
func isMCPStream(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Path == "/mcp" && strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// limit wraps h with the body rules of its route and the tenant's
// concurrency limit; it runs after authentication, so the tenant is known.
func (s *Server) limit(h http.Handler, mode bodyMode) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := tenant.Of(r.Context())
		if !s.readBody(w, r, mode) {
			return
		}
		l := s.limiter
		if isMCPStream(r) {
			l = s.streams
		}
		if l == nil {
			h.ServeHTTP(w, r)
			return
		}
		if !l.acquire(t) {
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
			writeError(w, r, http.StatusTooManyRequests, "rate_limited", "mneme: too many requests in flight for this tenant (limit "+strconv.Itoa(l.max)+"); retry after "+strconv.Itoa(RetryAfterSeconds)+"s")
			return
		}
		defer l.release(t)
		h.ServeHTTP(w, r)
	})
}

// readBody applies mode to r's body; false when it answered the request.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, mode bodyMode) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	if mode == bodyStream {
		// The deadline must not outlive the body: the server's read of the
		// next request on the connection would hit it and cancel this one.
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		return true
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, s.maxBody), r.ContentLength, s.maxBody)
	if err != nil {
		// The deadline stays: the server discards the rest of the body
		// before it answers, and must not wait for it. The connection is
		// not reused.
		w.Header().Set("Connection", "close")
	} else {
		_ = rc.SetReadDeadline(time.Time{})
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, r, http.StatusRequestEntityTooLarge, "too_large", "mneme: request body over "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
		return false
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(w, r, http.StatusRequestTimeout, "timeout", "mneme: the request body did not arrive within "+s.cfg.BodyTimeout.String())
		return false
	case err != nil:
		writeError(w, r, http.StatusBadRequest, "invalid", "mneme: could not read the request body")
		return false
	}
	if looksJSON(r, body) {
		if err := backend.CheckJSONText("the request body", body); err != nil {
			writeError(w, r, http.StatusBadRequest, "invalid", "mneme: "+strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
			return false
		}
	}
	r.Body = storedBody{bytes.NewReader(body), body}
	r.ContentLength = int64(len(body))
	return true
}

// readAll reads a body into one buffer of its declared length when it
// declares one within limit (io.ReadAll grows from 512 bytes, copying a
// large history a dozen times).
func readAll(body io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(body)
	}
	buf := bytes.NewBuffer(make([]byte, 0, declared+bytes.MinRead))
	_, err := buf.ReadFrom(body)
	return buf.Bytes(), err
}

// storedBody is a body read whole (bodyStored). Handlers that want the
// bytes take them from StoredBody instead of copying them again (the
// proxy); they must not modify them.
type storedBody struct {
	*bytes.Reader
	b []byte
}

func (storedBody) Close() error { return nil }

// StoredBody returns the whole body.
func (b storedBody) StoredBody() []byte { return b.b }

// looksJSON: a JSON content type, or none and a body that starts like JSON.
func looksJSON(r *http.Request, body []byte) bool {
	ct := r.Header.Get("Content-Type")
	if strings.Contains(ct, "json") {
		return true
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	return ct == "" && len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// deadlineBody clears the connection's read deadline once the body is
// read (or closed).
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	if !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return b.ReadCloser.Close()
}

// writeError answers in the shape of the route: the JSON API's
// {"error":{"code","message"}} under /api/, a JSON-RPC error on /mcp, and
// the OpenAI or Anthropic shape the request speaks elsewhere.
func writeError(w http.ResponseWriter, r *http.Request, status int, kind, msg string) {
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/api/"):
		api.WriteError(w, status, kind, msg)
	case p == "/mcp":
		mcpserver.WriteError(w, status, msg)
	default:
		proxy.WriteError(w, r, status, msg)
	}
}
