package metrics

import (
	"net/http"
	"strconv"
	"time"
)

// Middleware counts the requests h serves by route, method and status, and
// times them. The route is the ServeMux pattern that matched (Go sets
// Request.Pattern in place, so wrapping a whole mux works), or fixed when
// non-empty. Unmatched requests count under "unmatched": a label never
// holds a raw path, so a scan of random URLs cannot blow up the series.
func (m *Metrics) Middleware(fixed string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			route := fixed
			if route == "" {
				route = r.Pattern
			}
			if route == "" {
				route = "unmatched"
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			m.requests.WithLabelValues(route, r.Method, strconv.Itoa(status)).Inc()
			m.requestDuration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status written. It passes Flush on and
// exposes the writer underneath (Unwrap) so that http.ResponseController
// reaches it: streaming replies stay streamed.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the writer underneath when it can.
func (w *statusWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the writer underneath, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Transport times the calls made through next (nil: http.DefaultTransport)
// into mneme_upstream_request_duration_seconds. Give it to the proxy as its
// client's transport.
func (m *Metrics) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper{m: m, next: next}
}

type roundTripper struct {
	m    *Metrics
	next http.RoundTripper
}

func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	status := "error"
	if err == nil {
		status = strconv.Itoa(resp.StatusCode)
	}
	t.m.upstream.WithLabelValues(r.URL.Host, status).Observe(time.Since(start).Seconds())
	return resp, err
}
