package proxy

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/mnemehq/mneme/message"
)

// Streaming the Responses API. The upstream's events (response.created,
// response.output_item.added, response.content_part.added,
// response.output_text.delta, response.function_call_arguments.delta, the
// .done events, then response.completed, response.incomplete or
// response.failed) reach the client as they come, with these changes: the
// response's id is Mneme's; the events of recall calls are left out, and
// the items after them renumbered (output_index); a recall round's end and
// the next round's start are left out, so the client sees one response;
// sequence_number counts what the client gets; the terminal event's output
// and usage are those of the whole answer. The reply is recorded from the
// output_item.done items (from the deltas, for items a broken stream never
// finished).

// responsesStream follows one streamed round.
type responsesStream struct {
	d     *responsesDialect
	round int
	items []*rsItem // by upstream output_index
	base  int       // items the client got in earlier rounds
	sent  int       // items of this round the client got
}

type rsItem struct {
	added, done []byte
	typ, name   string
	recall      bool
	client      int // the output_index the client sees
	text, args  bytes.Buffer
}

func (d *responsesDialect) newStream(c *streamCarry) streamState {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &responsesStream{d: d, round: d.round, base: len(d.sentItems)}
	if d.round > 0 {
		d.seq = d.seqEnd // the last round's end never reached the client
	}
	d.round++
	return s
}

type rsEvent struct {
	Type        string          `json:"type"`
	OutputIndex *int            `json:"output_index"`
	Item        json.RawMessage `json:"item"`
	Response    json.RawMessage `json:"response"`
	Delta       json.RawMessage `json:"delta"`
	Seq         *int64          `json:"sequence_number"`
}

func (s *responsesStream) event(ev sseEvent) ([]byte, evKind) {
	var e rsEvent
	if len(ev.data) == 0 || json.Unmarshal(ev.data, &e) != nil {
		return ev.raw, evPass
	}
	switch e.Type {
	case "response.created", "response.in_progress", "response.queued":
		if s.round > 0 {
			return nil, evPass
		}
		return s.emit(ev, e, func(o *object) { s.setResponse(o, nil) }), evPass
	case "response.completed", "response.incomplete", "response.failed":
		var r responseBody
		_ = json.Unmarshal(e.Response, &r)
		s.d.observe(r)
		s.d.mu.Lock()
		s.d.seqEnd = s.d.seq
		s.d.mu.Unlock()
		return s.emit(ev, e, func(o *object) { s.setResponse(o, s.clientOutput()) }), evEnd
	case "response.output_item.added":
		if e.OutputIndex == nil || *e.OutputIndex < 0 || *e.OutputIndex > 1<<16 {
			return s.emit(ev, e, nil), evPass
		}
		idx := *e.OutputIndex
		for len(s.items) <= idx {
			s.items = append(s.items, nil)
		}
		it := &rsItem{added: bytes.Clone(e.Item)}
		var head struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		_ = json.Unmarshal(e.Item, &head)
		it.typ, it.name = head.Type, head.Name
		it.recall = it.typ == "function_call" && IsRecallTool(it.name)
		if !it.recall {
			it.client = s.base + s.sent
			s.sent++
		}
		s.items[idx] = it
		return s.forItem(ev, e, it, idx), evPass
	}
	if e.OutputIndex == nil || *e.OutputIndex < 0 || *e.OutputIndex >= len(s.items) || s.items[*e.OutputIndex] == nil {
		return s.emit(ev, e, nil), evPass
	}
	idx := *e.OutputIndex
	it := s.items[idx]
	switch e.Type {
	case "response.output_text.delta":
		it.text.WriteString(jsonString(e.Delta))
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		it.args.WriteString(jsonString(e.Delta))
	case "response.output_item.done":
		it.done = bytes.Clone(e.Item)
	}
	return s.forItem(ev, e, it, idx), evPass
}

func jsonString(raw json.RawMessage) string {
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v
}

// forItem returns what the client gets of an item's event: nothing for a
// recall call, the event renumbered when items before it were left out.
func (s *responsesStream) forItem(ev sseEvent, e rsEvent, it *rsItem, idx int) []byte {
	if it.recall {
		return nil
	}
	if it.client == idx {
		return s.emit(ev, e, nil)
	}
	return s.emit(ev, e, func(o *object) { o.set("output_index", []byte(strconv.Itoa(it.client))) })
}

// emit returns the event as the client gets it: numbered in the client's
// sequence, and changed by edit when given.
func (s *responsesStream) emit(ev sseEvent, e rsEvent, edit func(o *object)) []byte {
	d := s.d
	d.mu.Lock()
	seq := int64(-1)
	if e.Seq != nil {
		if !d.seqStarted {
			d.seq, d.seqStarted = *e.Seq, true
		}
		seq = d.seq
		d.seq++
	}
	d.mu.Unlock()
	if edit == nil && (e.Seq == nil || *e.Seq == seq) {
		return ev.raw
	}
	o, err := parseObject(ev.data)
	if err != nil {
		return ev.raw
	}
	if e.Seq != nil && *e.Seq != seq {
		o.set("sequence_number", []byte(strconv.FormatInt(seq, 10)))
	}
	if edit != nil {
		edit(o)
	}
	return sseEncode(ev.name, o.bytes())
}

// setResponse rewrites the event's response object: Mneme's id, and when
// output is given, that output and the usage of every round.
func (s *responsesStream) setResponse(o *object, output []byte) {
	r, err := parseObject(o.get("response"))
	if err != nil {
		return
	}
	if s.d.id != "" {
		r.set("id", []byte(jsonQuote(s.d.id)))
	}
	if s.d.prev != nil && r.get("previous_response_id") != nil {
		r.set("previous_response_id", []byte(jsonQuote(s.d.prev.id)))
	}
	if output != nil {
		r.set("output", output)
		s.d.mu.Lock()
		if s.d.usage.rounds > 1 {
			r.set("usage", s.d.usage.json())
		}
		s.d.mu.Unlock()
	}
	o.set("response", r.bytes())
}

// clientOutput is the output of the whole answer as the client saw it:
// the items of earlier rounds, then this round's, recall calls left out.
func (s *responsesStream) clientOutput() []byte {
	s.d.mu.Lock()
	elems := rawSlices(s.d.sentItems)
	s.d.mu.Unlock()
	for _, it := range s.items {
		if it != nil && !it.recall {
			if b := it.item(); b != nil {
				elems = append(elems, b)
			}
		}
	}
	return joinArray(elems...)
}

// item returns the item as done, or as far as the deltas built it.
func (it *rsItem) item() []byte {
	if it.done != nil {
		return it.done
	}
	o, err := parseObject(it.added)
	if err != nil {
		return nil
	}
	switch it.typ {
	case "message":
		if it.text.Len() == 0 {
			return nil
		}
		part, _ := json.Marshal(map[string]any{"type": "output_text", "text": it.text.String(), "annotations": []any{}})
		o.set("content", joinArray(part))
	case "function_call":
		o.set("arguments", []byte(jsonQuote(it.args.String())))
	case "custom_tool_call":
		o.set("input", []byte(jsonQuote(it.args.String())))
	}
	return o.bytes()
}

func (s *responsesStream) finishNormal(out []byte) []byte { return out }

func (s *responsesStream) message() (message.Message, error) {
	var elems [][]byte
	for _, it := range s.items {
		if it != nil {
			if b := it.item(); b != nil {
				elems = append(elems, b)
			}
		}
	}
	return message.DecodeResponsesOutput(joinArray(elems...))
}

func (s *responsesStream) carry(c *streamCarry) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	for _, it := range s.items {
		if it != nil && !it.recall {
			if b := it.item(); b != nil {
				s.d.sentItems = append(s.d.sentItems, b)
			}
		}
	}
}
