package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/mnemehq/mneme/message"
)

// openAIDialect speaks OpenAI Chat Completions.
// openAIDialect reads and writes Chat Completions; c (the zero value
// caches nothing) caches the messages it decodes and encodes, within the
// request's tenant.
type openAIDialect struct{ c message.Scoped }

func (openAIDialect) api() API     { return OpenAI }
func (openAIDialect) path() string { return "/v1/chat/completions" }

var errNoMessages = errors.New("messages: missing")

func (d openAIDialect) messages(req *object) ([]message.Message, error) {
	raw := req.get("messages")
	if raw == nil {
		return nil, errNoMessages
	}
	return d.c.DecodeOpenAIElems(raw, req.elems)
}

func (d openAIDialect) build(req *object, win []message.Message, recall bool) ([]byte, error) {
	return d.buildInto(nil, req, win, recall)
}

// buildInto is build appending to dst (pooledBuilder).
func (d openAIDialect) buildInto(dst []byte, req *object, win []message.Message, recall bool) ([]byte, error) {
	o := req
	if recall {
		o = &object{fields: slices.Clone(req.fields)}
		o.set("tools", withRecallTools(req.get("tools"), OpenAI))
	}
	// The window is written into the body in place of the client's
	// messages, most often about as long.
	return o.bytesWithInto(dst, "messages", len(req.get("messages"))+len(req.get("messages"))/8, func(b []byte) ([]byte, error) {
		return d.c.AppendOpenAIMessages(b, win)
	})
}

// responseOnly are the fields a response's message carries that a request's
// message must not: recorded replies are sent back upstream in windows.
var responseOnly = []string{"annotations", "refusal", "audio"}

func (openAIDialect) reply(body []byte) (message.Message, error) {
	var r struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return message.Message{}, err
	}
	if len(r.Choices) == 0 || len(r.Choices[0].Message) == 0 {
		return message.Message{}, errors.New("no choices[0].message")
	}
	m, err := message.DecodeOpenAI(r.Choices[0].Message)
	if err != nil {
		return m, err
	}
	cleanOpenAIReply(&m)
	return m, nil
}

// cleanOpenAIReply drops the response-only fields that carry nothing.
func cleanOpenAIReply(m *message.Message) {
	for _, k := range responseOnly {
		if v, ok := m.Wire.Extra[k]; ok && (string(v) == "null" || string(v) == "[]") {
			delete(m.Wire.Extra, k)
		}
	}
	// A reply's annotations (url citations) are not request fields.
	delete(m.Wire.Extra, "annotations")
}

func (openAIDialect) strip(body []byte) ([]byte, error) {
	v, err := decodeAny(body)
	if err != nil {
		return nil, err
	}
	choices, _ := v["choices"].([]any)
	if len(choices) == 0 {
		return body, nil
	}
	ch, _ := choices[0].(map[string]any)
	msg, _ := ch["message"].(map[string]any)
	if msg == nil {
		return body, nil
	}
	calls, _ := msg["tool_calls"].([]any)
	kept := filterCalls(calls)
	if len(kept) == 0 {
		delete(msg, "tool_calls")
		if ch["finish_reason"] == "tool_calls" {
			ch["finish_reason"] = "stop"
		}
		if msg["content"] == nil {
			msg["content"] = ""
		}
	} else {
		msg["tool_calls"] = kept
	}
	return json.Marshal(v)
}

// filterCalls drops the recall calls from OpenAI tool_calls entries.
func filterCalls(calls []any) []any {
	var kept []any
	for _, c := range calls {
		cm, _ := c.(map[string]any)
		fn, _ := cm["function"].(map[string]any)
		if name, _ := fn["name"].(string); IsRecallTool(name) {
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

func (openAIDialect) results(calls []message.Part, texts []string) []message.Message {
	out := make([]message.Message, len(calls))
	for i, c := range calls {
		out[i] = message.NewToolResult(c.ToolCallID, texts[i])
		out[i].Wire.API = string(OpenAI)
	}
	return out
}

// decodeAny decodes a JSON object keeping numbers as they were written.
func decodeAny(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, errNotObject
	}
	return v, nil
}

// openAIStream follows one streamed round of chat.completion.chunk events.
type openAIStream struct {
	c *streamCarry

	text    bytes.Buffer
	calls   []*streamCall // by upstream index
	nClient int
	finish  string
}

type streamCall struct {
	id, name string
	args     bytes.Buffer
	recall   bool
	client   int // index the client sees
}

func (openAIDialect) newStream(c *streamCarry) streamState { return &openAIStream{c: c} }

type openAIChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

func (s *openAIStream) event(ev sseEvent) ([]byte, evKind) {
	data := ev.data
	if string(data) == "[DONE]" {
		return ev.raw, evDone
	}
	var ch openAIChunk
	if len(data) == 0 || json.Unmarshal(data, &ch) != nil {
		return ev.raw, evPass
	}
	out := ev.raw
	if s.c.id == "" {
		s.c.id = ch.ID
	}
	if ch.ID != s.c.id && ch.ID != "" {
		// A later recall round: the client's accumulator wants one id.
		out = bytes.Replace(out, []byte(strconv.Quote(ch.ID)), []byte(strconv.Quote(s.c.id)), 1)
	}
	kind := evPass
	rewrite := false
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue
		}
		if c.Delta.Content != nil {
			s.text.WriteString(*c.Delta.Content)
		}
		for _, tc := range c.Delta.ToolCalls {
			for len(s.calls) <= tc.Index {
				s.calls = append(s.calls, nil)
			}
			sc := s.calls[tc.Index]
			if sc == nil {
				sc = &streamCall{id: tc.ID, name: tc.Function.Name, recall: IsRecallTool(tc.Function.Name), client: s.nClient}
				if !sc.recall {
					s.nClient++
				}
				s.calls[tc.Index] = sc
			}
			sc.args.WriteString(tc.Function.Arguments)
			if sc.recall || sc.client != tc.Index {
				rewrite = true
			}
		}
		if c.FinishReason != nil {
			s.finish = *c.FinishReason
			kind = evFinish
		}
	}
	if rewrite {
		out = s.rewrite(ev, out)
	}
	return out, kind
}

// rewrite takes the recall calls out of a chunk and renumbers the client's.
func (s *openAIStream) rewrite(ev sseEvent, out []byte) []byte {
	v, err := decodeAny(sseData(out))
	if err != nil {
		return out
	}
	choices, _ := v["choices"].([]any)
	keep := false
	for _, c := range choices {
		cm, _ := c.(map[string]any)
		if idx, _ := cm["index"].(json.Number); idx.String() != "0" {
			keep = true
			continue
		}
		delta, _ := cm["delta"].(map[string]any)
		calls, _ := delta["tool_calls"].([]any)
		var kept []any
		for _, tc := range calls {
			tm, _ := tc.(map[string]any)
			n, _ := tm["index"].(json.Number)
			i, _ := strconv.Atoi(n.String())
			if i < len(s.calls) && s.calls[i] != nil && s.calls[i].recall {
				continue
			}
			if i < len(s.calls) && s.calls[i] != nil {
				tm["index"] = s.calls[i].client
			}
			kept = append(kept, tm)
		}
		if len(kept) == 0 {
			delete(delta, "tool_calls")
		} else {
			delta["tool_calls"] = kept
		}
		if len(delta) > 0 || cm["finish_reason"] != nil {
			keep = true
		}
	}
	if !keep && v["usage"] == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out
	}
	return sseEncode(ev.name, b)
}

func (s *openAIStream) finishNormal(out []byte) []byte {
	v, err := decodeAny(sseData(out))
	if err != nil {
		return out
	}
	for _, c := range asSlice(v["choices"]) {
		if cm, _ := c.(map[string]any); cm != nil && cm["finish_reason"] == "tool_calls" {
			cm["finish_reason"] = "stop"
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out
	}
	return sseEncode("", b)
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func (s *openAIStream) message() (message.Message, error) {
	m := map[string]any{"role": "assistant"}
	text := s.text.String()
	if text != "" || len(s.calls) == 0 {
		m["content"] = text
	} else {
		m["content"] = nil
	}
	var calls []any
	for i, c := range s.calls {
		if c == nil {
			return message.Message{}, fmt.Errorf("tool call %d: never started", i)
		}
		calls = append(calls, map[string]any{
			"id": c.id, "type": "function",
			"function": map[string]any{"name": c.name, "arguments": c.args.String()},
		})
	}
	if len(calls) > 0 {
		m["tool_calls"] = calls
	}
	b, err := json.Marshal(m)
	if err != nil {
		return message.Message{}, err
	}
	return message.DecodeOpenAI(b)
}

func (s *openAIStream) carry(c *streamCarry) {}
