package server

import (
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/mnemehq/mneme/proxy"
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

// limit wraps h with the tenant's concurrency limit; it runs after
// authentication, so the tenant is known. A GET that asks for an event
// stream (MCP's standalone notification stream) is not counted: it stays
// open for the session's life and does no work of its own.
func (s *Server) limit(h http.Handler) http.Handler {
	if s.limiter == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			h.ServeHTTP(w, r)
			return
		}
		tenant := Tenant(r.Context())
		if !s.limiter.acquire(tenant) {
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
			proxy.WriteError(w, r, http.StatusTooManyRequests, "mneme: too many requests in flight for this tenant (limit "+strconv.Itoa(s.limiter.max)+"); retry after "+strconv.Itoa(RetryAfterSeconds)+"s")
			return
		}
		defer s.limiter.release(tenant)
		h.ServeHTTP(w, r)
	})
}
