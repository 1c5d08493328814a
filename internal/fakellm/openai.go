package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// openAIRequest is the part of a Chat Completions request the server reads.
type openAIRequest struct {
	Model         *string          `json:"model"`
	Messages      []map[string]any `json:"messages"`
	Stream        *bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
}

const openAIBadJSON = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"

// openAIRoles are the message roles Chat Completions accepts.
var openAIRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// parseOpenAI decodes and validates a Chat Completions request the way the
// real API does, writing the 400 itself when it fails.
func parseOpenAI(w http.ResponseWriter, r *http.Request, body []byte) (Request, bool, bool) {
	var in openAIRequest
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		writeError(w, APIOpenAI, http.StatusBadRequest, openAIBadJSON)
		return Request{}, false, false
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, "Invalid request: "+err.Error(), nil, nil)
		return Request{}, false, false
	}
	if in.Model == nil || *in.Model == "" {
		writeError(w, APIOpenAI, http.StatusBadRequest, "you must provide a model parameter")
		return Request{}, false, false
	}
	if in.Messages == nil {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
		return Request{}, false, false
	}
	if len(in.Messages) == 0 {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
		return Request{}, false, false
	}
	if msg, param := validateOpenAIMessages(in.Messages); msg != "" {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, msg, param, nil)
		return Request{}, false, false
	}
	req := Request{
		API:        APIOpenAI,
		Model:      *in.Model,
		Stream:     in.Stream != nil && *in.Stream,
		Body:       body,
		Messages:   in.Messages,
		Header:     r.Header.Clone(),
		toolTokens: roughTokens(string(raw["tools"])),
	}
	switch {
	case in.MaxCompletionTokens != nil:
		req.MaxTokens = *in.MaxCompletionTokens
	case in.MaxTokens != nil:
		req.MaxTokens = *in.MaxTokens
	}
	var system []string
	for _, m := range in.Messages {
		switch m["role"] {
		case "system", "developer":
			system = append(system, contentText(m["content"]))
		case "user":
			if t := userText(m["content"]); strings.TrimSpace(t) != "" {
				req.LastUserText = t
			}
		}
	}
	req.System = strings.Join(system, "\n")
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
	}
	includeUsage := in.StreamOptions != nil && in.StreamOptions.IncludeUsage
	return req, includeUsage, true
}

// validateOpenAIMessages checks roles and tool-call pairing as Chat
// Completions does: every assistant tool call must be answered by a tool
// message right after it, and every tool message must answer one.
func validateOpenAIMessages(msgs []map[string]any) (msg string, param any) {
	var open []string // ids of the last assistant tool calls not yet answered
	inRun := false    // inside the tool messages that follow tool calls
	var runIDs map[string]bool
	for i, m := range msgs {
		role, ok := m["role"].(string)
		if !ok {
			return fmt.Sprintf("Missing required parameter: 'messages[%d].role'.", i), fmt.Sprintf("messages[%d].role", i)
		}
		if !openAIRoles[role] {
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", role), fmt.Sprintf("messages[%d].role", i)
		}
		if role == "tool" {
			id, _ := m["tool_call_id"].(string)
			if !inRun || !runIDs[id] {
				return "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", fmt.Sprintf("messages.[%d].role", i)
			}
			open = remove(open, id)
			continue
		}
		if len(open) > 0 {
			return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", "), fmt.Sprintf("messages.[%d].role", i)
		}
		inRun = false
		if calls, ok := m["tool_calls"].([]any); ok && role == "assistant" && len(calls) > 0 {
			inRun, runIDs = true, map[string]bool{}
			for _, c := range calls {
				cm, _ := c.(map[string]any)
				id, _ := cm["id"].(string)
				open = append(open, id)
				runIDs[id] = true
			}
		}
	}
	if len(open) > 0 {
		return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", "), "messages"
	}
	return "", nil
}

func remove(ids []string, id string) []string {
	out := ids[:0]
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

func (s *Server) serveChatCompletions(w http.ResponseWriter, r *http.Request, body []byte) {
	req, includeUsage, ok := parseOpenAI(w, r, body)
	if !ok {
		return
	}
	rep, ok := s.replyFor(w, r, req)
	if !ok {
		return
	}
	a := resolve(APIOpenAI, req, rep)
	c := openAIChunker{id: newID("chatcmpl-"), created: time.Now().Unix(), model: req.Model, includeUsage: includeUsage}
	w.Header().Set("X-Request-Id", newID("req_"))
	if req.Stream {
		streamOpenAI(w, r, rep, a, c)
		return
	}
	var content any
	if a.text != "" || len(a.calls) == 0 {
		content = a.text
	}
	msg := object{{"role", "assistant"}, {"content", content}, {"refusal", nil}, {"annotations", []any{}}}
	if len(a.calls) > 0 {
		var calls []any
		for _, tc := range a.calls {
			calls = append(calls, object{
				{"id", tc.ID}, {"type", "function"},
				{"function", object{{"name", tc.Name}, {"arguments", tc.Arguments}}},
			})
		}
		msg = append(msg, field{"tool_calls", calls})
	}
	completion := object{
		{"id", c.id}, {"object", "chat.completion"}, {"created", c.created}, {"model", c.model},
		{"choices", []any{object{{"index", 0}, {"message", msg}, {"logprobs", nil}, {"finish_reason", a.stop}}}},
		{"usage", openAIUsage(a)},
		{"service_tier", "default"},
		{"system_fingerprint", "fp_fakellm"},
	}
	if rep.CutAfter > 0 {
		b, _ := marshal(completion)
		writeCut(w, b)
		return
	}
	writeJSON(w, http.StatusOK, completion)
}

func openAIUsage(a answer) object {
	return object{
		{"prompt_tokens", a.in}, {"completion_tokens", a.out}, {"total_tokens", a.in + a.out},
		{"prompt_tokens_details", object{{"cached_tokens", 0}, {"audio_tokens", 0}}},
		{"completion_tokens_details", object{{"reasoning_tokens", 0}, {"audio_tokens", 0}, {"accepted_prediction_tokens", 0}, {"rejected_prediction_tokens", 0}}},
	}
}

// openAIChunker builds the chat.completion.chunk objects of one stream.
type openAIChunker struct {
	id           string
	created      int64
	model        string
	includeUsage bool
}

func (c openAIChunker) head() object {
	return object{
		{"id", c.id}, {"object", "chat.completion.chunk"}, {"created", c.created}, {"model", c.model},
		{"service_tier", "default"}, {"system_fingerprint", "fp_fakellm"},
	}
}

// chunk is one choice delta; with include_usage every chunk carries
// "usage": null, as upstream does.
func (c openAIChunker) chunk(delta object, finish any) object {
	o := append(c.head(), field{"choices", []any{object{{"index", 0}, {"delta", delta}, {"logprobs", nil}, {"finish_reason", finish}}}})
	if c.includeUsage {
		o = append(o, field{"usage", nil})
	}
	return o
}

// streamOpenAI sends the answer as chat.completion.chunk events: the role,
// the content in pieces, each tool call (id and name, then argument
// fragments), the finish reason, the usage when asked, then [DONE].
func streamOpenAI(w http.ResponseWriter, r *http.Request, rep Reply, a answer, c openAIChunker) {
	ev := newSSE(w, r, rep)
	var content any = ""
	if a.text == "" && len(a.calls) > 0 {
		content = nil
	}
	if !ev.sendJSON("", c.chunk(object{{"role", "assistant"}, {"content", content}, {"refusal", nil}}, nil)) {
		return
	}
	if rep.Malformed && !ev.send("", `{"id": "`+c.id+`", "object": "chat.completion.chunk", "choices": [{"delta": {"content": "unterminated`) {
		return
	}
	for _, piece := range splitChunks(a.text) {
		if !ev.sendJSON("", c.chunk(object{{"content", piece}}, nil)) {
			return
		}
	}
	for i, tc := range a.calls {
		head := object{{"index", i}, {"id", tc.ID}, {"type", "function"}, {"function", object{{"name", tc.Name}, {"arguments", ""}}}}
		if !ev.sendJSON("", c.chunk(object{{"tool_calls", []any{head}}}, nil)) {
			return
		}
		for _, frag := range splitChunks(tc.Arguments) {
			d := object{{"index", i}, {"function", object{{"arguments", frag}}}}
			if !ev.sendJSON("", c.chunk(object{{"tool_calls", []any{d}}}, nil)) {
				return
			}
		}
	}
	if !ev.sendJSON("", c.chunk(object{}, a.stop)) {
		return
	}
	if c.includeUsage && !ev.sendJSON("", append(c.head(), field{"choices", []any{}}, field{"usage", openAIUsage(a)})) {
		return
	}
	ev.send("", "[DONE]")
}
