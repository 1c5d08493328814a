package fakellm_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/internal/fakellm"
)

// Any body on any route gets a well-formed answer: a JSON object (or, for a
// 200 stream, an event stream), never a panic.
func FuzzHandler(f *testing.F) {
	seeds := []string{
		`{"model":"m","messages":[{"role":"user","content":"hi 42 main.go"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"mneme:observer x_y"}]}],"system":[{"type":"text","text":"s"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c"}]},{"role":"tool","tool_call_id":"c","content":[1]}]}`,
		`{"model":"e","input":[[1,2],[3]],"dimensions":3}`,
		`{"model":"m","messages":[{"role":"user","content":null}],"tools":[{"name":1}]}`,
		`[]`, `null`, `{"model":`,
		`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}],"stream":true}`,
		`{"model":"m","input":"hi","previous_response_id":"resp_x"}`,
	}
	for _, s := range seeds {
		for _, p := range []string{"/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/v1/responses"} {
			f.Add(p, s)
		}
	}
	s := fakellm.New()
	h := s.Handler()
	f.Fuzz(func(t *testing.T, path, body string) {
		defer s.Reset()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.URL.Path = "/" + strings.TrimLeft(path, "/")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusOK && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			if !strings.HasPrefix(rec.Body.String(), "data: ") && !strings.HasPrefix(rec.Body.String(), "event: ") {
				t.Fatalf("stream does not start with an event: %q", rec.Body.String())
			}
			return
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%d %s: body is not a JSON object: %v: %q", rec.Code, path, err, rec.Body.String())
		}
		if rec.Code != http.StatusOK && v["error"] == nil {
			t.Fatalf("%d without an error object: %s", rec.Code, rec.Body.String())
		}
	})
}
