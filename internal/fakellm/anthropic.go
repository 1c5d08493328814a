package fakellm

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// anthropicRequest is the part of a Messages request the server reads.
type anthropicRequest struct {
	Model     *string          `json:"model"`
	Messages  []map[string]any `json:"messages"`
	System    any              `json:"system"`
	MaxTokens *int             `json:"max_tokens"`
	Stream    *bool            `json:"stream"`
	Tools     []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

// maxCacheControl is how many blocks of one request may carry cache_control.
const maxCacheControl = 4

// signKey signs the thinking this process hands out, so that a thinking or
// redacted_thinking block sent back altered (or never issued) is caught, as
// the real API catches it.
var signKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}()

// sign returns the signature of a thinking text (or redacted data).
func sign(kind, text string) string {
	h := hmac.New(sha256.New, signKey)
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(text))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// redactedData returns fresh opaque data for a redacted_thinking block: a
// nonce and its signature.
func redactedData() string {
	nonce := rand.Text()
	return nonce + "." + sign("redacted", nonce)
}

func validRedacted(data string) bool {
	nonce, mac, ok := strings.Cut(data, ".")
	return ok && hmac.Equal([]byte(mac), []byte(sign("redacted", nonce)))
}

// countCacheControl counts the blocks that carry cache_control: in the
// tools, the system blocks, the messages' content blocks and the blocks
// inside tool results, as the API counts them.
func countCacheControl(raw map[string]json.RawMessage) int {
	n := 0
	var blocks func(v any, depth int)
	blocks = func(v any, depth int) {
		list, _ := v.([]any)
		for _, b := range list {
			bm, _ := b.(map[string]any)
			if bm == nil {
				continue
			}
			if _, ok := bm["cache_control"]; ok && bm["cache_control"] != nil {
				n++
			}
			if depth == 0 {
				blocks(bm["content"], 1)
			}
		}
	}
	for _, k := range []string{"tools", "system"} {
		var v any
		_ = json.Unmarshal(raw[k], &v)
		blocks(v, 1)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(raw["messages"], &msgs)
	for _, m := range msgs {
		blocks(m["content"], 0)
	}
	return n
}

// parseAnthropic decodes and validates a Messages (or count_tokens) request
// the way the real API does, writing the 400 itself when it fails.
func parseAnthropic(w http.ResponseWriter, r *http.Request, body []byte, needMaxTokens bool) (Request, bool) {
	var in anthropicRequest
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		writeError(w, APIAnthropic, http.StatusBadRequest, "There was an error parsing the body of your request: "+err.Error())
		return Request{}, false
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, APIAnthropic, http.StatusBadRequest, "Invalid request: "+err.Error())
		return Request{}, false
	}
	var missing []string
	if in.Model == nil {
		missing = append(missing, "model: Field required")
	}
	if in.Messages == nil {
		missing = append(missing, "messages: Field required")
	}
	if needMaxTokens && in.MaxTokens == nil {
		missing = append(missing, "max_tokens: Field required")
	}
	if len(missing) > 0 {
		writeError(w, APIAnthropic, http.StatusBadRequest, strings.Join(missing, "; "))
		return Request{}, false
	}
	if *in.Model == "" {
		writeError(w, APIAnthropic, http.StatusBadRequest, "model: String should have at least 1 character")
		return Request{}, false
	}
	if needMaxTokens && *in.MaxTokens < 1 {
		writeError(w, APIAnthropic, http.StatusBadRequest, "max_tokens: Input should be greater than or equal to 1")
		return Request{}, false
	}
	if n := countCacheControl(raw); n > maxCacheControl {
		writeError(w, APIAnthropic, http.StatusBadRequest, fmt.Sprintf("A maximum of %d blocks with cache_control may be provided. Found %d.", maxCacheControl, n))
		return Request{}, false
	}
	if msg := validateAnthropicMessages(in.Messages); msg != "" {
		writeError(w, APIAnthropic, http.StatusBadRequest, msg)
		return Request{}, false
	}
	req := Request{
		API:        APIAnthropic,
		Model:      *in.Model,
		Stream:     in.Stream != nil && *in.Stream,
		Body:       body,
		Messages:   in.Messages,
		System:     contentText(in.System),
		Header:     r.Header.Clone(),
		Thinking:   in.Thinking != nil && (in.Thinking.Type == "enabled" || in.Thinking.Type == "adaptive"),
		toolTokens: roughTokens(string(raw["tools"])),
	}
	if in.MaxTokens != nil {
		req.MaxTokens = *in.MaxTokens
	}
	for _, m := range in.Messages {
		if m["role"] == "user" {
			if t := userText(m["content"]); strings.TrimSpace(t) != "" {
				req.LastUserText = t
			}
		}
	}
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, t.Name)
	}
	return req, true
}

// validateAnthropicMessages checks roles, tool pairing and thinking blocks
// as the Messages API does: the tool_use blocks of an assistant message must
// each have a tool_result in the next message, every tool_result must
// answer a tool_use of the previous message, and a thinking or
// redacted_thinking block must come back as it was issued. System messages
// may stand among the messages (mid-conversation system messages: Claude
// Code sends them without asking for a beta).
func validateAnthropicMessages(msgs []map[string]any) string {
	var prevUses map[string]bool
	for i, m := range msgs {
		role, _ := m["role"].(string)
		if role != "user" && role != "assistant" && role != "system" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user', 'assistant' or 'system'", i)
		}
		if _, ok := m["content"]; !ok {
			return fmt.Sprintf("messages.%d.content: Field required", i)
		}
		blocks, _ := m["content"].([]any)
		uses := map[string]bool{}
		answered := map[string]bool{}
		for j, b := range blocks {
			bm, _ := b.(map[string]any)
			switch bm["type"] {
			case "tool_use":
				id, _ := bm["id"].(string)
				uses[id] = true
			case "thinking", "redacted_thinking":
				if role != "assistant" {
					return fmt.Sprintf("messages.%d.content.%d: `%s` blocks are only allowed in assistant messages", i, j, bm["type"])
				}
				thinking, _ := bm["thinking"].(string)
				sig, _ := bm["signature"].(string)
				data, _ := bm["data"].(string)
				if bm["type"] == "thinking" && !hmac.Equal([]byte(sig), []byte(sign("thinking", thinking))) {
					return fmt.Sprintf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
				}
				if bm["type"] == "redacted_thinking" && !validRedacted(data) {
					return fmt.Sprintf("messages.%d.content.%d: Invalid `data` in `redacted_thinking` block", i, j)
				}
			case "tool_result":
				id, _ := bm["tool_use_id"].(string)
				if !prevUses[id] {
					return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, id)
				}
				answered[id] = true
			}
		}
		var unanswered []string
		for id := range prevUses {
			if !answered[id] {
				unanswered = append(unanswered, id)
			}
		}
		if len(unanswered) > 0 {
			return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(slices.Sorted(slices.Values(unanswered)), ", "))
		}
		prevUses = uses
	}
	return ""
}

func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request, body []byte) {
	req, ok := parseAnthropic(w, r, body, true)
	if !ok {
		return
	}
	rep, ok := s.replyFor(w, r, req)
	if !ok {
		return
	}
	a := resolve(APIAnthropic, req, rep)
	id := newID("msg_")
	w.Header().Set("Request-Id", newID("req_"))
	if req.Stream {
		streamAnthropic(w, r, req, rep, a, id)
		return
	}
	content := []any{}
	if req.Thinking && rep.Thinking != "" {
		content = append(content, object{{"type", "thinking"}, {"thinking", rep.Thinking}, {"signature", sign("thinking", rep.Thinking)}})
	}
	if req.Thinking && rep.RedactedThinking {
		content = append(content, object{{"type", "redacted_thinking"}, {"data", redactedData()}})
	}
	if a.text != "" {
		content = append(content, object{{"type", "text"}, {"text", a.text}})
	}
	for _, c := range a.calls {
		content = append(content, object{{"type", "tool_use"}, {"id", c.ID}, {"name", c.Name}, {"input", toolInput(c.Arguments)}})
	}
	msg := anthropicMessage(id, req.Model, content, a.stop, anthropicUsage(a.in, a.out))
	if rep.CutAfter > 0 {
		b, _ := marshal(msg)
		writeCut(w, b)
		return
	}
	writeJSON(w, http.StatusOK, msg)
}

func anthropicMessage(id, model string, content []any, stop any, usage object) object {
	return object{
		{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", model},
		{"content", content}, {"stop_reason", stop}, {"stop_sequence", nil},
		{"usage", usage},
	}
}

// toolInput returns arguments as a JSON object, or {} when they are not one.
func toolInput(args string) json.RawMessage {
	var obj map[string]any
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(args)
}

func anthropicUsage(in, out int) object {
	return object{
		{"input_tokens", in}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0},
		{"output_tokens", out}, {"service_tier", "standard"},
	}
}

// streamAnthropic sends the answer as Messages stream events:
// message_start, then per content block content_block_start (a ping after
// the first), its deltas and content_block_stop, then message_delta and
// message_stop.
func streamAnthropic(w http.ResponseWriter, r *http.Request, req Request, rep Reply, a answer, id string) {
	ev := newSSE(w, r, rep)
	start := object{{"type", "message_start"}, {"message", anthropicMessage(id, req.Model, []any{}, nil, anthropicUsage(a.in, 1))}}
	if !ev.sendJSON("message_start", start) {
		return
	}
	if rep.Malformed && !ev.send("content_block_start", `{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "unterminated`) {
		return
	}
	pinged := false
	ping := func() bool {
		if pinged {
			return true
		}
		pinged = true
		return ev.send("ping", `{"type": "ping"}`)
	}
	index := 0
	block := func(startBlock object, deltas []object) bool {
		if !ev.sendJSON("content_block_start", object{{"type", "content_block_start"}, {"index", index}, {"content_block", startBlock}}) || !ping() {
			return false
		}
		for _, d := range deltas {
			if !ev.sendJSON("content_block_delta", object{{"type", "content_block_delta"}, {"index", index}, {"delta", d}}) {
				return false
			}
		}
		ok := ev.sendJSON("content_block_stop", object{{"type", "content_block_stop"}, {"index", index}})
		index++
		return ok
	}
	if req.Thinking && rep.Thinking != "" {
		var deltas []object
		for _, piece := range splitChunks(rep.Thinking) {
			deltas = append(deltas, object{{"type", "thinking_delta"}, {"thinking", piece}})
		}
		deltas = append(deltas, object{{"type", "signature_delta"}, {"signature", sign("thinking", rep.Thinking)}})
		if !block(object{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, deltas) {
			return
		}
	}
	if req.Thinking && rep.RedactedThinking {
		if !block(object{{"type", "redacted_thinking"}, {"data", redactedData()}}, nil) {
			return
		}
	}
	if a.text != "" {
		var deltas []object
		for _, piece := range splitChunks(a.text) {
			deltas = append(deltas, object{{"type", "text_delta"}, {"text", piece}})
		}
		if !block(object{{"type", "text"}, {"text", ""}}, deltas) {
			return
		}
	}
	for _, c := range a.calls {
		deltas := []object{{{"type", "input_json_delta"}, {"partial_json", ""}}}
		for _, frag := range splitChunks(c.Arguments) {
			deltas = append(deltas, object{{"type", "input_json_delta"}, {"partial_json", frag}})
		}
		if !block(object{{"type", "tool_use"}, {"id", c.ID}, {"name", c.Name}, {"input", object{}}}, deltas) {
			return
		}
	}
	if !ping() {
		return
	}
	delta := object{
		{"type", "message_delta"},
		{"delta", object{{"stop_reason", a.stop}, {"stop_sequence", nil}}},
		{"usage", object{{"output_tokens", a.out}}},
	}
	if !ev.sendJSON("message_delta", delta) {
		return
	}
	ev.send("message_stop", `{"type": "message_stop"}`)
}

func (s *Server) serveCountTokens(w http.ResponseWriter, r *http.Request, body []byte) {
	req, ok := parseAnthropic(w, r, body, false)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, object{{"input_tokens", promptTokens(req)}})
}
