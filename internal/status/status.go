// Package status maps errors to what an HTTP client is told: the status
// code, a short kind, the message it may see and when to retry. The proxy,
// the JSON API and MCP render the same mapping in their own shapes, so an
// error means the same status on every route. A 5xx never shows the
// error's text (it may name files, hosts or SQL): the message gives the
// request id instead, and the caller logs the error with that id.
package status

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// Status is what the client is told about an error.
type Status struct {
	Code int    // the HTTP status
	Kind string // a short machine-readable name: invalid, budget, not_found, ...
	// Message is safe to show: the error's text for a client's mistake, a
	// fixed sentence with the request id for a fault of the server.
	Message string
	// RetryAfter, in seconds, when the client should retry (0: no header).
	RetryAfter int
}

// StatusClientClosed is what is logged for a request whose client went away.
const StatusClientClosed = 499

// RetryAfterUnavailable is how long a client is asked to wait after a
// transient fault of the store (disk full, database unreachable).
const RetryAfterUnavailable = 5

// Upstream marks an error of the exchange with an upstream model API (it
// could not be reached, broke the connection or did not answer in time).
type Upstream struct{ Err error }

func (e *Upstream) Error() string { return "upstream: " + e.Err.Error() }
func (e *Upstream) Unwrap() error { return e.Err }

// Of maps err for the request whose context is ctx (for its request id).
func Of(ctx context.Context, err error) Status {
	var be *window.BudgetError
	var fe *window.FieldError
	var mbe *http.MaxBytesError
	var up *Upstream
	id := RequestID(ctx)
	switch {
	case errors.As(err, &mbe):
		return Status{Code: http.StatusRequestEntityTooLarge, Kind: "too_large", Message: err.Error()}
	case errors.As(err, &be):
		return Status{Code: http.StatusBadRequest, Kind: "budget", Message: err.Error()}
	case errors.As(err, &fe), errors.Is(err, store.ErrInvalid):
		return Status{Code: http.StatusBadRequest, Kind: "invalid", Message: err.Error()}
	case errors.Is(err, store.ErrNotFound):
		return Status{Code: http.StatusNotFound, Kind: "not_found", Message: "not found"}
	case errors.Is(err, store.ErrConflict):
		return Status{Code: http.StatusConflict, Kind: "conflict", Message: err.Error()}
	case errors.Is(err, store.ErrUnavailable):
		return Status{Code: http.StatusServiceUnavailable, Kind: "unavailable", RetryAfter: RetryAfterUnavailable,
			Message: "mneme: the store is unavailable; retry later (request id " + id + ")"}
	case errors.As(err, &up) && isTimeout(err):
		return Status{Code: http.StatusGatewayTimeout, Kind: "upstream_timeout", Message: "mneme: the upstream model API did not answer in time (request id " + id + ")"}
	case errors.As(err, &up):
		return Status{Code: http.StatusBadGateway, Kind: "upstream_unreachable", Message: "mneme: the upstream model API is unreachable (request id " + id + ")"}
	case errors.Is(err, context.Canceled):
		return Status{Code: StatusClientClosed, Kind: "canceled", Message: "request canceled"}
	case isTimeout(err):
		return Status{Code: http.StatusGatewayTimeout, Kind: "timeout", Message: "mneme: the request timed out (request id " + id + ")"}
	}
	return Status{Code: http.StatusInternalServerError, Kind: "internal", Message: "mneme: internal error (request id " + id + ")"}
}

// Log logs err when it is a fault of the server (a 5xx), with the request
// id the client was given.
func Log(ctx context.Context, log *slog.Logger, where string, st Status, err error) {
	if st.Code < 500 || log == nil {
		return
	}
	log.Error(where, "request_id", RequestID(ctx), "status", st.Code, "err", err)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type requestIDKey struct{}

// HeaderRequestID is the response header that carries a request's id.
const HeaderRequestID = "X-Request-Id"

// WithRequestID returns ctx carrying a new request id, and the id.
func WithRequestID(ctx context.Context) (context.Context, string) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "req_" + hex.EncodeToString(b[:])
	return context.WithValue(ctx, requestIDKey{}, id), id
}

// RequestID returns the id of the request ctx belongs to ("-" when none).
func RequestID(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return id
	}
	return "-"
}
