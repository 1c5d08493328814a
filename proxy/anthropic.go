package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"

	"github.com/mnemehq/mneme/message"
)

// anthropicDialect speaks the Anthropic Messages API.
type anthropicDialect struct{}

func (anthropicDialect) api() API     { return Anthropic }
func (anthropicDialect) path() string { return "/v1/messages" }

func (anthropicDialect) messages(req *object) ([]message.Message, error) {
	raw := req.get("messages")
	if raw == nil {
		return nil, errNoMessages
	}
	sys, err := message.DecodeAnthropicSystem(req.get("system"))
	if err != nil {
		return nil, err
	}
	msgs, err := message.DecodeAnthropicMessages(raw)
	if err != nil {
		return nil, err
	}
	return append(sys, msgs...), nil
}

func (anthropicDialect) build(req *object, win []message.Message, recall bool) ([]byte, error) {
	// The client's breakpoints of this request, to honour where their
	// blocks sit in the window (decoded again only when there are some).
	var marks []breakpoint
	if raw := req.get("system"); bytes.Contains(raw, []byte(cacheControlKey)) {
		if sys, err := message.DecodeAnthropicSystem(raw); err == nil {
			marks = clientBreakpoints(sys)
		}
	}
	if raw := req.get("messages"); bytes.Contains(raw, []byte(cacheControlKey)) {
		if ms, err := message.DecodeAnthropicMessages(raw); err == nil {
			marks = append(marks, clientBreakpoints(ms)...)
		}
	}
	win = placeBreakpoints(mergeUserRuns(win), marks, countToolBreakpoints(splitArray(req.get("tools"))))
	sys, msgs, err := message.EncodeAnthropicMessages(win)
	if err != nil {
		return nil, err
	}
	o := &object{fields: slices.Clone(req.fields)}
	if sys != nil {
		o.set("system", sys)
	} else {
		o.del("system")
	}
	o.set("messages", msgs)
	if recall {
		o.set("tools", withRecallTools(req.get("tools"), Anthropic))
	}
	return o.bytes(), nil
}

// mergeUserRuns joins a message of tool results with the user-side
// messages that follow it: Anthropic wants every result of an assistant
// turn in the one next message, and the log may hold them in two (the
// proxy's own recall results, then the client's).
func mergeUserRuns(win []message.Message) []message.Message {
	userSide := func(m *message.Message) bool { return m.Role == message.User || m.Role == message.Tool }
	hasResults := func(m *message.Message) bool { return len(m.ToolResults()) > 0 }
	need := false
	for i := 0; i+1 < len(win); i++ {
		if userSide(&win[i]) && hasResults(&win[i]) && userSide(&win[i+1]) {
			need = true
			break
		}
	}
	if !need {
		return win
	}
	out := make([]message.Message, 0, len(win))
	for i := 0; i < len(win); i++ {
		m := win[i]
		if !userSide(&m) || !hasResults(&m) || i+1 >= len(win) || !userSide(&win[i+1]) {
			out = append(out, m)
			continue
		}
		var results, rest []message.Part
		j := i
		for ; j < len(win) && userSide(&win[j]); j++ {
			for _, p := range win[j].Parts {
				if p.Type == message.ToolResult {
					results = append(results, p)
				} else {
					rest = append(rest, p)
				}
			}
		}
		merged := message.Message{Role: message.User, Parts: append(results, rest...), Time: m.Time, Wire: m.Wire}
		merged.Wire.Form = "parts"
		if merged.Wire.API == "" || m.Role == message.Tool {
			merged.Wire = message.Wire{API: string(Anthropic), Form: "parts"}
		}
		out = append(out, merged)
		i = j - 1
	}
	return out
}

func (anthropicDialect) reply(body []byte) (message.Message, error) {
	var r struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return message.Message{}, err
	}
	if len(r.Content) == 0 {
		return message.Message{}, errors.New("no content")
	}
	b := make([]byte, 0, len(r.Content)+32)
	b = append(b, `{"role":"assistant","content":`...)
	b = append(b, r.Content...)
	b = append(b, '}')
	return message.DecodeAnthropic(b)
}

func (anthropicDialect) strip(body []byte) ([]byte, error) {
	v, err := decodeAny(body)
	if err != nil {
		return nil, err
	}
	var kept []any
	uses := 0
	for _, b := range asSlice(v["content"]) {
		bm, _ := b.(map[string]any)
		if bm["type"] == "tool_use" {
			if name, _ := bm["name"].(string); IsRecallTool(name) {
				continue
			}
			uses++
		}
		kept = append(kept, b)
	}
	if kept == nil {
		kept = []any{}
	}
	v["content"] = kept
	if uses == 0 && v["stop_reason"] == "tool_use" {
		v["stop_reason"] = "end_turn"
	}
	return json.Marshal(v)
}

func (anthropicDialect) results(calls []message.Part, texts []string) []message.Message {
	m := message.Message{Role: message.User, Wire: message.Wire{API: string(Anthropic), Form: "parts"}}
	for i, c := range calls {
		m.Parts = append(m.Parts, message.Part{
			Type: message.ToolResult, ToolCallID: c.ToolCallID,
			Content: []message.Part{{Type: message.Text, Text: texts[i]}},
		})
	}
	return []message.Message{m}
}

// anthropicStream follows one streamed round of Messages events.
type anthropicStream struct {
	c      *streamCarry
	round  int
	blocks []*streamBlock // by upstream index
	sent   int            // blocks the client got in this round
}

type streamBlock struct {
	start  map[string]any // the content_block of content_block_start
	text   bytes.Buffer   // text, thinking or partial_json
	sig    string
	recall bool
	client int // the index the client sees
}

func (anthropicDialect) newStream(c *streamCarry) streamState {
	s := &anthropicStream{c: c, round: c.round}
	c.round++
	return s
}

type anthropicEvent struct {
	Type         string          `json:"type"`
	Index        int             `json:"index"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
	} `json:"delta"`
}

func (s *anthropicStream) event(ev sseEvent) ([]byte, evKind) {
	var e anthropicEvent
	if len(ev.data) == 0 || json.Unmarshal(ev.data, &e) != nil {
		return ev.raw, evPass
	}
	switch e.Type {
	case "message_start":
		if s.round > 0 {
			return nil, evPass
		}
	case "content_block_start":
		var cb map[string]any
		d := json.NewDecoder(bytes.NewReader(e.ContentBlock))
		d.UseNumber()
		_ = d.Decode(&cb)
		for len(s.blocks) <= e.Index {
			s.blocks = append(s.blocks, nil)
		}
		name, _ := cb["name"].(string)
		b := &streamBlock{start: cb, recall: cb["type"] == "tool_use" && IsRecallTool(name), client: s.c.blocks + s.sent}
		if !b.recall {
			s.sent++
		}
		s.blocks[e.Index] = b
		if text, _ := cb["text"].(string); text != "" {
			b.text.WriteString(text)
		}
		return s.forBlock(ev, b, e.Index), evPass
	case "content_block_delta", "content_block_stop":
		if e.Index >= len(s.blocks) || s.blocks[e.Index] == nil {
			return ev.raw, evPass
		}
		b := s.blocks[e.Index]
		switch e.Delta.Type {
		case "text_delta":
			b.text.WriteString(e.Delta.Text)
		case "input_json_delta":
			b.text.WriteString(e.Delta.PartialJSON)
		case "thinking_delta":
			b.text.WriteString(e.Delta.Thinking)
		case "signature_delta":
			b.sig += e.Delta.Signature
		}
		return s.forBlock(ev, b, e.Index), evPass
	case "message_delta":
		return ev.raw, evFinish
	case "message_stop":
		return ev.raw, evDone
	}
	return ev.raw, evPass
}

// forBlock returns what the client gets of a block's event: nothing for a
// recall call, the event renumbered when blocks before it were left out.
func (s *anthropicStream) forBlock(ev sseEvent, b *streamBlock, index int) []byte {
	if b.recall {
		return nil
	}
	if b.client == index {
		return ev.raw
	}
	v, err := decodeAny(ev.data)
	if err != nil {
		return ev.raw
	}
	v["index"] = b.client
	out, err := json.Marshal(v)
	if err != nil {
		return ev.raw
	}
	return sseEncode(ev.name, out)
}

func (s *anthropicStream) finishNormal(out []byte) []byte {
	v, err := decodeAny(sseData(out))
	if err != nil {
		return out
	}
	if d, _ := v["delta"].(map[string]any); d != nil && d["stop_reason"] == "tool_use" {
		d["stop_reason"] = "end_turn"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out
	}
	return sseEncode("message_delta", b)
}

func (s *anthropicStream) message() (message.Message, error) {
	content := []any{}
	for _, b := range s.blocks {
		if b == nil {
			continue
		}
		blk := map[string]any{}
		for k, v := range b.start {
			blk[k] = v
		}
		switch b.start["type"] {
		case "text":
			blk["text"] = b.text.String()
		case "thinking":
			blk["thinking"] = b.text.String()
			blk["signature"] = b.sig
		case "tool_use":
			in := b.text.Bytes()
			if !json.Valid(in) || len(bytes.TrimSpace(in)) == 0 || bytes.TrimSpace(in)[0] != '{' {
				in = []byte("{}") // a stream cut inside the arguments
			}
			blk["input"] = json.RawMessage(in)
		}
		content = append(content, blk)
	}
	raw, err := json.Marshal(map[string]any{"role": "assistant", "content": content})
	if err != nil {
		return message.Message{}, err
	}
	return message.DecodeAnthropic(raw)
}

func (s *anthropicStream) carry(c *streamCarry) { c.blocks += s.sent }
