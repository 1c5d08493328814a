package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The OpenAI Responses API (POST /v1/responses, GET /v1/responses/{id}),
// as strict as the real one where Mneme could go wrong: every function_call
// must be answered by a function_call_output with its call_id and every
// output must answer a call before it (400 otherwise), items must be well
// formed (400), and a previous_response_id or item_reference the server does
// not hold is refused (404 / 400). The server keeps a response only when the
// request's store is not false (the API's default is true), so a client
// that relies on stored state with store: false fails here as it would
// upstream.

// APIResponses is the value of [Request.API] and [Recorded.API] for the
// Responses API.
const APIResponses = "responses"

// responsesRequest is the part of a Responses request the server reads.
type responsesRequest struct {
	Model              *string         `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Stream             *bool           `json:"stream"`
	Store              *bool           `json:"store"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Tools              []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
}

// storedResponse is what the server keeps of a stored response: the
// conversation it ended (input items then output items) and its object.
type storedResponse struct {
	items []json.RawMessage
	body  []byte
}

// responseItemTypes are the input item types the server accepts.
var responseItemTypes = map[string]bool{
	"message": true, "function_call": true, "function_call_output": true, "reasoning": true,
	"custom_tool_call": true, "custom_tool_call_output": true, "item_reference": true,
	"web_search_call": true, "file_search_call": true, "computer_call": true, "computer_call_output": true,
	"code_interpreter_call": true, "image_generation_call": true, "local_shell_call": true,
	"local_shell_call_output": true, "mcp_list_tools": true, "mcp_approval_request": true,
	"mcp_approval_response": true, "mcp_call": true,
}

func badResponses(w http.ResponseWriter, msg string, param any) {
	writeErrorParam(w, APIOpenAI, http.StatusBadRequest, msg, param, nil)
}

// parseResponses decodes and validates a Responses request, writing the
// error itself when it fails. It returns the request, the conversation
// items (stored ones first, item references resolved) and the input items.
func (s *Server) parseResponses(w http.ResponseWriter, r *http.Request, body []byte) (Request, []json.RawMessage, responsesRequest, bool) {
	var in responsesRequest
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		writeError(w, APIOpenAI, http.StatusBadRequest, openAIBadJSON)
		return Request{}, nil, in, false
	}
	if err := json.Unmarshal(body, &in); err != nil {
		badResponses(w, "Invalid request: "+err.Error(), nil)
		return Request{}, nil, in, false
	}
	if in.Model == nil || *in.Model == "" {
		badResponses(w, "Missing required parameter: 'model'.", "model")
		return Request{}, nil, in, false
	}
	var items []json.RawMessage
	if in.PreviousResponseID != nil {
		s.mu.Lock()
		prev, ok := s.stored[*in.PreviousResponseID]
		s.mu.Unlock()
		if !ok {
			writeErrorParam(w, APIOpenAI, http.StatusNotFound, fmt.Sprintf("Previous response with id '%s' not found.", *in.PreviousResponseID), "previous_response_id", "previous_response_not_found")
			return Request{}, nil, in, false
		}
		items = append(items, prev.items...)
	}
	var input []json.RawMessage
	switch {
	case len(in.Input) == 0 || string(in.Input) == "null":
		if in.PreviousResponseID == nil {
			badResponses(w, "Missing required parameter: 'input'.", "input")
			return Request{}, nil, in, false
		}
	case in.Input[0] == '"':
		var text string
		_ = json.Unmarshal(in.Input, &text)
		b, _ := marshal(object{{"role", "user"}, {"content", text}})
		input = []json.RawMessage{b}
	default:
		if err := json.Unmarshal(in.Input, &input); err != nil {
			badResponses(w, "Invalid type for 'input': expected a string or an array of input items.", "input")
			return Request{}, nil, in, false
		}
	}
	for i, it := range input {
		resolved, status, msg := s.checkItem(it, i)
		if msg != "" {
			writeErrorParam(w, APIOpenAI, status, msg, fmt.Sprintf("input[%d]", i), nil)
			return Request{}, nil, in, false
		}
		items = append(items, resolved)
	}
	if msg := checkPairing(items); msg != "" {
		badResponses(w, msg, "input")
		return Request{}, nil, in, false
	}
	req := Request{
		API:        APIResponses,
		Model:      *in.Model,
		Stream:     in.Stream != nil && *in.Stream,
		Body:       body,
		Header:     r.Header.Clone(),
		toolTokens: roughTokens(string(raw["tools"])),
	}
	if in.MaxOutputTokens != nil {
		req.MaxTokens = *in.MaxOutputTokens
	}
	var system []string
	if in.Instructions != nil && *in.Instructions != "" {
		system = append(system, *in.Instructions)
	}
	for _, it := range items {
		m := chatView(it)
		if m == nil {
			continue
		}
		req.Messages = append(req.Messages, m)
		switch m["role"] {
		case "system", "developer":
			system = append(system, contentText(m["content"]))
		case "user":
			if t := contentText(m["content"]); strings.TrimSpace(t) != "" {
				req.LastUserText = t
			}
		}
	}
	req.System = strings.Join(system, "\n")
	for _, t := range in.Tools {
		if t.Name != "" {
			req.Tools = append(req.Tools, t.Name)
		}
	}
	return req, items, in, true
}

// checkItem validates one input item as the API does and resolves an
// item_reference; it returns the status and message of the error, if any.
func (s *Server) checkItem(raw json.RawMessage, i int) (json.RawMessage, int, string) {
	var it map[string]json.RawMessage
	if json.Unmarshal(raw, &it) != nil || it == nil {
		return nil, 400, fmt.Sprintf("Invalid type for 'input[%d]': expected an object.", i)
	}
	str := func(k string) (string, bool) {
		var v string
		if json.Unmarshal(it[k], &v) != nil {
			return "", false
		}
		return v, true
	}
	typ, ok := str("type")
	if !ok {
		if _, hasRole := it["role"]; !hasRole {
			return nil, 400, fmt.Sprintf("Missing required parameter: 'input[%d].type'.", i)
		}
		typ = "message"
	}
	if !responseItemTypes[typ] {
		return nil, 400, fmt.Sprintf("Invalid value: '%s'. Supported values are: 'message', 'function_call', 'function_call_output', 'reasoning', 'item_reference' and the built-in tool items.", typ)
	}
	need := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := str(k); !ok || v == "" && k != "arguments" && k != "input" {
				return fmt.Sprintf("Missing required parameter: 'input[%d].%s'.", i, k)
			}
		}
		return ""
	}
	switch typ {
	case "message":
		role, _ := str("role")
		switch role {
		case "user", "system", "developer", "assistant":
		default:
			return nil, 400, fmt.Sprintf("Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", role)
		}
		if msg := checkContent(it["content"], fmt.Sprintf("input[%d].content", i)); msg != "" {
			return nil, 400, msg
		}
	case "function_call":
		if msg := need("call_id", "name", "arguments"); msg != "" {
			return nil, 400, msg
		}
	case "custom_tool_call":
		if msg := need("call_id", "name", "input"); msg != "" {
			return nil, 400, msg
		}
	case "function_call_output", "custom_tool_call_output":
		if msg := need("call_id"); msg != "" {
			return nil, 400, msg
		}
		out := it["output"]
		if len(out) == 0 || out[0] != '"' && out[0] != '[' {
			return nil, 400, fmt.Sprintf("Invalid type for 'input[%d].output': expected a string or an array of content items.", i)
		}
		if out[0] == '[' {
			if msg := checkContent(out, fmt.Sprintf("input[%d].output", i)); msg != "" {
				return nil, 400, msg
			}
		}
	case "reasoning":
		if _, ok := it["summary"]; !ok {
			return nil, 400, fmt.Sprintf("Missing required parameter: 'input[%d].summary'.", i)
		}
	case "item_reference":
		id, _ := str("id")
		s.mu.Lock()
		ref, ok := s.storedItems[id]
		s.mu.Unlock()
		if !ok {
			return nil, 404, fmt.Sprintf("Item with id '%s' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", id)
		}
		return ref, 0, ""
	}
	return raw, 0, ""
}

// checkContent validates a message's content: a string or an array of
// content parts.
func checkContent(raw json.RawMessage, param string) string {
	if len(raw) > 0 && raw[0] == '"' {
		return ""
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return fmt.Sprintf("Invalid type for '%s': expected a string or an array of content parts.", param)
	}
	for j, p := range parts {
		var typ string
		_ = json.Unmarshal(p["type"], &typ)
		switch typ {
		case "input_text", "output_text":
			var t string
			if json.Unmarshal(p["text"], &t) != nil {
				return fmt.Sprintf("Missing required parameter: '%s[%d].text'.", param, j)
			}
		case "input_image":
			if p["image_url"] == nil && p["file_id"] == nil {
				return fmt.Sprintf("Missing required parameter: '%s[%d].image_url'.", param, j)
			}
		case "input_file", "refusal", "input_audio":
		default:
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'input_text', 'input_image', 'output_text', 'refusal', 'input_file' and 'input_audio'.", typ)
		}
	}
	return ""
}

// checkPairing applies the API's pairing rules by call_id: every output
// answers a call made before it, and every call is answered.
func checkPairing(items []json.RawMessage) string {
	calls := map[string]bool{} // call_id -> answered
	var order []string
	for _, raw := range items {
		var it struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		}
		_ = json.Unmarshal(raw, &it)
		switch it.Type {
		case "function_call", "custom_tool_call":
			if _, dup := calls[it.CallID]; !dup {
				order = append(order, it.CallID)
			}
			calls[it.CallID] = false
		case "function_call_output", "custom_tool_call_output":
			if _, ok := calls[it.CallID]; !ok {
				return fmt.Sprintf("No tool call found for function call output with call_id %s.", it.CallID)
			}
			calls[it.CallID] = true
		}
	}
	for _, id := range order {
		if !calls[id] {
			return fmt.Sprintf("No tool output found for function call %s.", id)
		}
	}
	return ""
}

// chatView turns an item into the chat-shaped message the default replies
// read (nil for items with no text).
func chatView(raw json.RawMessage) map[string]any {
	var it map[string]any
	if json.Unmarshal(raw, &it) != nil {
		return nil
	}
	typ, _ := it["type"].(string)
	if typ == "" {
		typ = "message"
	}
	switch typ {
	case "message":
		return map[string]any{"role": it["role"], "content": it["content"]}
	case "function_call":
		return map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
			"id": it["call_id"], "type": "function", "function": map[string]any{"name": it["name"], "arguments": it["arguments"]},
		}}}
	case "function_call_output", "custom_tool_call_output":
		return map[string]any{"role": "tool", "tool_call_id": it["call_id"], "content": it["output"]}
	}
	return nil
}

func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request, body []byte) {
	req, items, in, ok := s.parseResponses(w, r, body)
	if !ok {
		return
	}
	rep, ok := s.replyFor(w, r, req)
	if !ok {
		return
	}
	a := resolve(APIResponses, req, rep)
	id := newID("resp_")
	created := time.Now().Unix()
	var output []any
	var msgItem object
	if a.text != "" || len(a.calls) == 0 {
		msgItem = object{{"id", newID("msg_")}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"},
			{"content", []any{object{{"type", "output_text"}, {"annotations", []any{}}, {"logprobs", []any{}}, {"text", a.text}}}}}
		output = append(output, msgItem)
	}
	var callItems []object
	for _, c := range a.calls {
		ci := object{{"id", newID("fc_")}, {"type", "function_call"}, {"status", "completed"}, {"arguments", c.Arguments}, {"call_id", c.ID}, {"name", c.Name}}
		callItems = append(callItems, ci)
		output = append(output, ci)
	}
	status, incomplete := "completed", any(nil)
	if a.stop == "length" {
		status, incomplete = "incomplete", object{{"reason", "max_output_tokens"}}
	}
	store := in.Store == nil || *in.Store
	resp := func(status string, output []any, usage any) object {
		var instructions, prev any
		if in.Instructions != nil {
			instructions = *in.Instructions
		}
		if in.PreviousResponseID != nil {
			prev = *in.PreviousResponseID
		}
		if output == nil {
			output = []any{}
		}
		inc := incomplete
		if status == "in_progress" {
			inc = nil
		}
		return object{
			{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status}, {"background", false},
			{"error", nil}, {"incomplete_details", inc}, {"instructions", instructions}, {"max_output_tokens", nilIfZero(req.MaxTokens)},
			{"model", req.Model}, {"output", output}, {"parallel_tool_calls", true}, {"previous_response_id", prev},
			{"reasoning", object{{"effort", nil}, {"summary", nil}}}, {"store", store}, {"temperature", 1.0},
			{"text", object{{"format", object{{"type", "text"}}}}}, {"tool_choice", "auto"}, {"tools", []any{}},
			{"top_p", 1.0}, {"truncation", "disabled"}, {"usage", usage}, {"user", nil}, {"metadata", object{}},
		}
	}
	usage := object{
		{"input_tokens", a.in}, {"input_tokens_details", object{{"cached_tokens", 0}}},
		{"output_tokens", a.out}, {"output_tokens_details", object{{"reasoning_tokens", 0}}}, {"total_tokens", a.in + a.out},
	}
	final := resp(status, output, usage)
	if store {
		b, _ := marshal(final)
		conv := append([]json.RawMessage(nil), items...)
		s.mu.Lock()
		for _, o := range output {
			ob, _ := marshal(o)
			conv = append(conv, ob)
			s.storedItems[o.(object)[0].v.(string)] = ob
		}
		s.stored[id] = storedResponse{items: conv, body: b}
		s.mu.Unlock()
	}
	w.Header().Set("X-Request-Id", newID("req_"))
	if !req.Stream {
		if rep.CutAfter > 0 {
			b, _ := marshal(final)
			writeCut(w, b)
			return
		}
		writeJSON(w, http.StatusOK, final)
		return
	}
	ev := newSSE(w, r, rep)
	seq := 0
	send := func(typ string, fields ...field) bool {
		o := append(object{{"type", typ}, {"sequence_number", seq}}, fields...)
		seq++
		return ev.sendJSON(typ, o)
	}
	if !send("response.created", field{"response", resp("in_progress", nil, nil)}) ||
		!send("response.in_progress", field{"response", resp("in_progress", nil, nil)}) {
		return
	}
	if rep.Malformed && !ev.send("response.output_text.delta", `{"type": "response.output_text.delta", "delta": "unterminated`) {
		return
	}
	idx := 0
	if msgItem != nil {
		itemID := msgItem[0].v.(string)
		added := object{{"id", itemID}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"}, {"content", []any{}}}
		empty := object{{"type", "output_text"}, {"annotations", []any{}}, {"logprobs", []any{}}, {"text", ""}}
		if !send("response.output_item.added", field{"output_index", idx}, field{"item", added}) ||
			!send("response.content_part.added", field{"item_id", itemID}, field{"output_index", idx}, field{"content_index", 0}, field{"part", empty}) {
			return
		}
		for _, piece := range splitChunks(a.text) {
			if !send("response.output_text.delta", field{"item_id", itemID}, field{"output_index", idx}, field{"content_index", 0}, field{"delta", piece}, field{"logprobs", []any{}}) {
				return
			}
		}
		full := object{{"type", "output_text"}, {"annotations", []any{}}, {"logprobs", []any{}}, {"text", a.text}}
		if !send("response.output_text.done", field{"item_id", itemID}, field{"output_index", idx}, field{"content_index", 0}, field{"text", a.text}, field{"logprobs", []any{}}) ||
			!send("response.content_part.done", field{"item_id", itemID}, field{"output_index", idx}, field{"content_index", 0}, field{"part", full}) ||
			!send("response.output_item.done", field{"output_index", idx}, field{"item", msgItem}) {
			return
		}
		idx++
	}
	for i, ci := range callItems {
		c := a.calls[i]
		itemID := ci[0].v.(string)
		added := object{{"id", itemID}, {"type", "function_call"}, {"status", "in_progress"}, {"arguments", ""}, {"call_id", c.ID}, {"name", c.Name}}
		if !send("response.output_item.added", field{"output_index", idx}, field{"item", added}) {
			return
		}
		for _, frag := range splitChunks(c.Arguments) {
			if !send("response.function_call_arguments.delta", field{"item_id", itemID}, field{"output_index", idx}, field{"delta", frag}) {
				return
			}
		}
		if !send("response.function_call_arguments.done", field{"item_id", itemID}, field{"output_index", idx}, field{"arguments", c.Arguments}) ||
			!send("response.output_item.done", field{"output_index", idx}, field{"item", ci}) {
			return
		}
		idx++
	}
	terminal := "response.completed"
	if status == "incomplete" {
		terminal = "response.incomplete"
	}
	send(terminal, field{"response", final})
}

func nilIfZero(n int) any {
	if n == 0 {
		return nil
	}
	return n
}

// serveResponseGet answers GET /v1/responses/{id} for stored responses.
func (s *Server) serveResponseGet(w http.ResponseWriter, r *http.Request, _ []byte) {
	id := strings.TrimPrefix(strings.TrimSuffix(r.URL.Path, "/"), "/v1/responses/")
	s.mu.Lock()
	st, ok := s.stored[id]
	s.mu.Unlock()
	if !ok {
		writeErrorParam(w, APIOpenAI, http.StatusNotFound, fmt.Sprintf("Response with id '%s' not found.", id), nil, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(st.body)
}
