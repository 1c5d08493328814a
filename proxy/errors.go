package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/mnemehq/mneme/internal/status"
)

// API names the wire format a client speaks.
type API string

// The two APIs the proxy speaks.
const (
	OpenAI    API = "openai"
	Anthropic API = "anthropic"
)

// APIOf tells which API a request speaks: Anthropic for /v1/messages and
// its sub-paths or when the request carries Anthropic's mandatory
// anthropic-version header, OpenAI otherwise.
func APIOf(r *http.Request) API {
	if strings.HasPrefix(r.URL.Path, "/v1/messages") || r.Header.Get("anthropic-version") != "" {
		return Anthropic
	}
	return OpenAI
}

// WriteError answers with an error in the shape of the API the request
// speaks: OpenAI's {"error":{"message","type","param","code"}} or
// Anthropic's {"type":"error","error":{"type","message"}}. The server uses
// it for 401s so that every error a client sees parses with its own SDK.
func WriteError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeError(w, APIOf(r), status, msg)
}

// fail answers err in the shape of api, with the status internal/status
// maps it to (the one mapping the JSON API and MCP use too), logs a fault
// of the server with the request id the client is given, and returns the
// status.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, api API, err error) int {
	st := status.Of(r.Context(), err)
	status.Log(r.Context(), p.log, "proxy", st, err)
	if st.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(st.RetryAfter))
	}
	writeError(w, api, st.Code, st.Message)
	return st.Code
}

func writeError(w http.ResponseWriter, api API, status int, msg string) {
	var body any
	if api == Anthropic {
		body = map[string]any{
			"type":  "error",
			"error": map[string]any{"type": anthropicErrorType(status), "message": msg},
		}
	} else {
		body = map[string]any{
			"error": map[string]any{"message": msg, "type": openAIErrorType(status), "param": nil, "code": openAIErrorCode(status)},
		}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func openAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func openAIErrorCode(status int) any {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case http.StatusBadGateway:
		return "upstream_unreachable"
	case http.StatusGatewayTimeout:
		return "upstream_timeout"
	case http.StatusServiceUnavailable:
		return "service_unavailable"
	}
	return nil
}
