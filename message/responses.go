package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The OpenAI Responses API speaks in items, not messages: an input or an
// output is a list of message items, reasoning items, function calls,
// function call outputs, built-in tool calls and more. The codec maps them
// onto Messages so that the window's rules hold as they do for the other
// APIs:
//
//   - A user, system or developer message item is one Message.
//   - A run of consecutive model-side items (assistant message items,
//     reasoning, function_call, custom_tool_call, the built-in tool calls,
//     item_reference, and item kinds this package does not know) is ONE
//     assistant Message, one part per item (a message item gives one part
//     per content part). A model turn thus stays whole: a reasoning item is
//     never cut from the call that follows it, and the calls of one turn
//     are answered by the outputs after them, as the window expects.
//   - A function_call_output or custom_tool_call_output is a tool Message
//     with one ToolResult part (pairing by call_id); the outputs of built-in
//     calls (computer_call_output, local_shell_call_output, ...) and
//     mcp_approval_response are tool Messages holding the item opaque.
//
// What the codec keeps in Wire for a Responses message: Wire.API
// "responses"; on a user/system/developer Message, Wire.Type "message" when
// the item carried an explicit type, Wire.Role "developer", Wire.Form
// "string" or "parts" for its content, and Wire.Extra for the item's other
// members. On a part: Wire.Type is the item or content part type
// ("function_call", "output_text", "web_search_call"); a content part of an
// assistant message item has Wire.Form "item" (it starts the item, whose
// content was an array), "item:string" (it starts the item, whose content
// was a string) or "part" (it continues the item); Wire.Item holds the
// unmodeled members of the item the part starts (id, status, ...), and
// Wire.Extra the part's own (annotations, logprobs). A reasoning item is a
// Reasoning part: Text is its summary text, Signature its encrypted_content,
// and the rest (summary as sent, id, content) is in Wire.Extra. Built-in
// tool calls, their outputs, item references, content parts other than
// text and images (input_file, refusal, ...) and unknown item kinds are
// Opaque parts, byte-exact.
//
// Messages from another API (or built in Go) encode canonically: text as
// input_text (output_text for the assistant), tool calls as function_call,
// tool results as function_call_output; what Responses cannot take (another
// API's reasoning and opaque parts) is left out.

// The value of Wire.API for the Responses codec.
const apiResponses = "responses"

// Part Wire.Form values of the content parts of an assistant message item.
const (
	formItem       = "item"
	formItemString = "item:string"
	formPart       = "part"
)

// itemSide says where an item kind belongs.
type itemSide int

const (
	sideMessage itemSide = iota // a message item: its role decides
	sideModel                   // made by the model: joins the assistant run
	sideResult                  // answers a call: a tool Message
)

func sideOf(typ string) itemSide {
	switch typ {
	case "message":
		return sideMessage
	case "function_call_output", "custom_tool_call_output", "mcp_approval_response":
		return sideResult
	}
	if strings.HasSuffix(typ, "_output") {
		return sideResult
	}
	return sideModel
}

// DecodeResponsesInput decodes the "input" of a Responses request: a string
// (one user message) or an array of items. Invalid input gives a
// *DecodeError naming the item ("input[3].call_id: missing").
func DecodeResponsesInput(data []byte) ([]Message, error) {
	s := scanner{data: data}
	if s.peek() == '"' {
		t, err := s.str()
		if err == nil {
			err = s.end()
		}
		if err != nil {
			return nil, &DecodeError{Index: -1, Field: "input", Msg: err.Error(), List: "input"}
		}
		return []Message{{Role: User, Parts: []Part{{Type: Text, Text: t}}, Wire: Wire{API: apiResponses, Form: "string"}}}, nil
	}
	if s.peek() != '[' {
		return nil, &DecodeError{Index: -1, Field: "input", Msg: "want a string or an array of items", List: "input"}
	}
	var d itemDecoder
	idx := -1
	err := s.array(func(i int) error {
		idx = i
		return d.item(&s, false)
	})
	if err == nil {
		idx = -1
		err = s.end()
	}
	if err != nil {
		err = atIndex(err, idx)
		de := err.(*DecodeError)
		de.List = "input"
		if de.Index < 0 && de.Field == "" {
			de.Field = "input"
		}
		return nil, err
	}
	d.flush()
	return d.out, nil
}

// DecodeResponsesOutput decodes the "output" array of a response into the
// assistant message it is: every item is the model's, one part per item
// (content part, for message items). An empty output gives an assistant
// message without parts.
func DecodeResponsesOutput(data []byte) (Message, error) {
	s := scanner{data: data}
	if s.peek() != '[' {
		return Message{}, &DecodeError{Index: -1, Field: "output", Msg: "want an array of items", List: "output"}
	}
	var d itemDecoder
	idx := -1
	err := s.array(func(i int) error {
		idx = i
		return d.item(&s, true)
	})
	if err == nil {
		idx = -1
		err = s.end()
	}
	if err != nil {
		err = atIndex(err, idx)
		err.(*DecodeError).List = "output"
		return Message{}, err
	}
	d.flush()
	m := Message{Role: Assistant, Wire: Wire{API: apiResponses}}
	for _, o := range d.out {
		m.Parts = append(m.Parts, o.Parts...)
	}
	return m, nil
}

// itemDecoder gathers decoded items into Messages, joining model-side runs.
type itemDecoder struct {
	out []Message
	run *Message // the assistant run being gathered
}

func (d *itemDecoder) flush() {
	if d.run != nil {
		d.out = append(d.out, *d.run)
		d.run = nil
	}
}

func (d *itemDecoder) add(m Message) {
	d.flush()
	d.out = append(d.out, m)
}

func (d *itemDecoder) addModel(ps ...Part) {
	if d.run == nil {
		d.run = &Message{Role: Assistant, Wire: Wire{API: apiResponses}}
	}
	d.run.Parts = append(d.run.Parts, ps...)
}

// rawItem is one item's members as sent.
type rawItem struct {
	ms []member
}

func (it *rawItem) get(key string) ([]byte, bool) {
	var raw []byte
	ok := false
	for _, m := range it.ms {
		if m.key == key {
			raw, ok = m.raw, true
		}
	}
	return raw, ok
}

// str returns a member's string value: ok false when absent, an error
// when it is not a string.
func (it *rawItem) str(key string) (string, bool, error) {
	raw, ok := it.get(key)
	if !ok {
		return "", false, nil
	}
	s := scanner{data: raw}
	v, err := s.str()
	if err != nil {
		return "", true, fieldErr(key, "want string")
	}
	return v, true, nil
}

// need returns a required string member.
func (it *rawItem) need(key string) (string, error) {
	v, ok, err := it.str(key)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", fieldErr(key, "missing")
	}
	return v, nil
}

// item decodes one item at the scanner. output says the item is in a
// response's output, where everything is the model's.
func (d *itemDecoder) item(s *scanner, output bool) error {
	s.ws()
	start := s.pos
	var it rawItem
	err := s.object(func(k []byte) error {
		key := keyName(k)
		raw, err := s.skip()
		it.ms = append(it.ms, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return err
	}
	whole := bytes.Clone(s.data[start:s.pos])
	typ, hasType, err := it.str("type")
	if err != nil {
		return err
	}
	if !hasType {
		if _, ok := it.get("role"); !ok {
			return fieldErr("type", "missing")
		}
		typ = "message"
	}
	side := sideOf(typ)
	if output && side == sideResult {
		side = sideModel
	}
	switch {
	case typ == "message":
		return d.messageItem(&it, hasType)
	case typ == "function_call", typ == "custom_tool_call":
		p, err := toolCallItem(&it, typ)
		if err != nil {
			return err
		}
		d.addModel(p)
	case typ == "reasoning":
		p, err := reasoningItem(&it)
		if err != nil {
			return err
		}
		d.addModel(p)
	case !output && (typ == "function_call_output" || typ == "custom_tool_call_output"):
		p, err := toolOutputItem(&it, typ)
		if err != nil {
			return err
		}
		d.add(Message{Role: Tool, Parts: []Part{p}, Wire: Wire{API: apiResponses}})
	case side == sideResult:
		if _, err := it.need("call_id"); err != nil && typ != "mcp_approval_response" {
			return err
		}
		d.add(Message{Role: Tool, Parts: []Part{{Type: Opaque, Raw: whole, Wire: Wire{Type: typ}}}, Wire: Wire{API: apiResponses}})
	default:
		d.addModel(Part{Type: Opaque, Raw: whole, Wire: Wire{Type: typ}})
	}
	return nil
}

func (d *itemDecoder) messageItem(it *rawItem, hasType bool) error {
	role, err := it.need("role")
	if err != nil {
		return err
	}
	content, ok := it.get("content")
	if !ok {
		return fieldErr("content", "missing")
	}
	m := Message{Wire: Wire{API: apiResponses}}
	switch role {
	case "user", "system", "assistant":
		m.Role = Role(role)
	case "developer":
		m.Role, m.Wire.Role = System, role
	default:
		return fieldErr("role", fmt.Sprintf("unknown role %q", role))
	}
	s := scanner{data: content}
	parts, form, err := decodeContent(&s, decodeResponsesPart)
	if err != nil {
		return under(err, "content")
	}
	if form == "null" {
		return fieldErr("content", "want string or array")
	}
	extra := extraOf(it.ms, "type", "role", "content")
	if m.Role != Assistant {
		if hasType {
			m.Wire.Type = "message"
		}
		m.Parts, m.Wire.Form, m.Wire.Extra = parts, form, extra
		if form == "string" {
			m.Parts[0].Wire.Type = ""
		}
		d.add(m)
		return nil
	}
	// An assistant message item joins the run, its content parts marked
	// so that the item can be written back whole.
	if len(parts) == 0 {
		// Nothing to hang the item on: keep it as it came.
		var b []byte
		o := openObject(&b)
		for _, mb := range lastOfEach(it.ms) {
			o.raw(mb.key, mb.raw)
		}
		o.close()
		d.addModel(Part{Type: Opaque, Raw: b, Wire: Wire{Type: "message"}})
		return nil
	}
	item := extraOf(it.ms, "role", "content")
	for i := range parts {
		parts[i].Wire.Form = formPart
	}
	parts[0].Wire.Form = formItem
	if form == "string" {
		parts[0].Wire.Form = formItemString
		parts[0].Wire.Type = ""
	}
	parts[0].Wire.Item = item
	d.addModel(parts...)
	return nil
}

// decodeResponsesPart decodes one content part: input_text, output_text,
// input_image, or anything else kept as Opaque.
func decodeResponsesPart(s *scanner) (Part, error) {
	s.ws()
	start := s.pos
	var it rawItem
	err := s.object(func(k []byte) error {
		key := keyName(k)
		raw, err := s.skip()
		it.ms = append(it.ms, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return Part{}, err
	}
	typ, err := it.need("type")
	if err != nil {
		return Part{}, err
	}
	switch typ {
	case "input_text", "output_text":
		text, err := it.need("text")
		if err != nil {
			return Part{}, err
		}
		return Part{Type: Text, Text: text, Wire: Wire{Type: typ, Extra: extraOf(it.ms, "type", "text")}}, nil
	case "input_image":
		url, _, err := it.str("image_url")
		if err != nil && !isNull(mustGet(&it, "image_url")) {
			return Part{}, err
		}
		detail, _, _ := it.str("detail")
		known := []string{"type"}
		if url != "" {
			known = append(known, "image_url")
		}
		if detail != "" {
			known = append(known, "detail")
		}
		return Part{Type: Image, ImageURL: url, Detail: detail, Wire: Wire{Type: typ, Extra: extraOf(it.ms, known...)}}, nil
	}
	return Part{Type: Opaque, Raw: bytes.Clone(s.data[start:s.pos]), Wire: Wire{Type: typ}}, nil
}

func mustGet(it *rawItem, key string) []byte {
	raw, _ := it.get(key)
	return raw
}

func toolCallItem(it *rawItem, typ string) (Part, error) {
	id, err := it.need("call_id")
	if err != nil {
		return Part{}, err
	}
	if id == "" {
		return Part{}, fieldErr("call_id", "missing")
	}
	name, err := it.need("name")
	if err != nil {
		return Part{}, err
	}
	if name == "" {
		return Part{}, fieldErr("name", "missing")
	}
	argKey := "arguments"
	if typ == "custom_tool_call" {
		argKey = "input"
	}
	args, err := it.need(argKey)
	if err != nil {
		return Part{}, err
	}
	return Part{Type: ToolCall, ToolCallID: id, ToolName: name, Arguments: args,
		Wire: Wire{Type: typ, Extra: extraOf(it.ms, "type", "call_id", "name", argKey)}}, nil
}

func reasoningItem(it *rawItem) (Part, error) {
	p := Part{Type: Reasoning, Wire: Wire{Type: "reasoning"}}
	known := []string{"type"}
	enc, ok, err := it.str("encrypted_content")
	if err == nil && ok {
		p.Signature = enc
		known = append(known, "encrypted_content")
	}
	if raw, ok := it.get("summary"); ok {
		s := scanner{data: raw}
		var texts []string
		err := s.array(func(i int) error {
			var t string
			err := s.object(func(k []byte) error {
				if string(k) == "text" && s.peek() == '"' {
					v, err := s.str()
					t = v
					return err
				}
				_, err := s.skip()
				return err
			})
			texts = append(texts, t)
			return under(err, index(i))
		})
		if err != nil {
			return Part{}, under(err, "summary")
		}
		p.Text = strings.Join(texts, "\n\n")
	}
	p.Wire.Extra = extraOf(it.ms, known...)
	return p, nil
}

func toolOutputItem(it *rawItem, typ string) (Part, error) {
	id, err := it.need("call_id")
	if err != nil {
		return Part{}, err
	}
	if id == "" {
		return Part{}, fieldErr("call_id", "missing")
	}
	out, ok := it.get("output")
	if !ok {
		return Part{}, fieldErr("output", "missing")
	}
	s := scanner{data: out}
	content, form, err := decodeContent(&s, decodeResponsesPart)
	if err != nil {
		return Part{}, under(err, "output")
	}
	if form == "null" {
		return Part{}, fieldErr("output", "want string or array")
	}
	if form == "string" {
		content[0].Wire.Type = ""
	}
	return Part{Type: ToolResult, ToolCallID: id, Content: content,
		Wire: Wire{Type: typ, Form: form, Extra: extraOf(it.ms, "type", "call_id", "output")}}, nil
}

// EncodeResponsesInput encodes ms as the "input" array of a Responses
// request.
func EncodeResponsesInput(ms []Message) (json.RawMessage, error) {
	b := make([]byte, 0, encodedSize(ms))
	b = append(b, '[')
	n := 0
	for i := range ms {
		var err error
		if n, err = writeResponsesItems(&b, &ms[i], n); err != nil {
			return nil, fmt.Errorf("input[%d]: %w", i, err)
		}
	}
	return append(b, ']'), nil
}

// EncodeResponsesOutput encodes an assistant message as the "output" array
// of a response.
func EncodeResponsesOutput(m Message) (json.RawMessage, error) {
	b := make([]byte, 0, 256)
	b = append(b, '[')
	if _, err := writeResponsesItems(&b, &m, 0); err != nil {
		return nil, err
	}
	return append(b, ']'), nil
}

// writeResponsesItems writes the items of one message, n items having been
// written before; it returns the new count.
func writeResponsesItems(b *[]byte, m *Message, n int) (int, error) {
	if !m.Role.Valid() {
		return n, fmt.Errorf("%w: invalid role %q", ErrEncode, m.Role)
	}
	same := m.Wire.API == apiResponses || m.Wire.API == ""
	sep := func() {
		if n > 0 {
			*b = append(*b, ',')
		}
		n++
	}
	if m.Role == Assistant {
		return writeAssistantItems(b, m, n, same)
	}
	// Tool results first (an Anthropic user message carries them with
	// other parts), then the rest as one message item.
	var rest []Part
	for i := range m.Parts {
		p := &m.Parts[i]
		switch {
		case p.Type == ToolResult:
			sep()
			if err := writeToolOutput(b, p, same); err != nil {
				return n, err
			}
		case m.Role == Tool && p.Type == Opaque && same:
			sep()
			*b = append(*b, p.Raw...)
		case m.Role == Tool:
			return n, fmt.Errorf("%w: %s part in a tool message", ErrEncode, p.Type)
		case p.Type == Opaque && !same, p.Type == Reasoning, p.Type == ToolCall:
			// Not content of a Responses message item.
		default:
			rest = append(rest, *p)
		}
	}
	if m.Role == Tool || len(rest) == 0 && len(m.Parts) > 0 {
		return n, nil
	}
	sep()
	o := openObject(b)
	if same && m.Wire.Type == "message" {
		o.str("type", "message")
	}
	role := string(m.Role)
	if same && m.Wire.Role != "" {
		role = m.Wire.Role
	}
	o.str("role", role)
	o.key("content")
	if len(rest) == 1 && rest[0].Type == Text && (same && m.Wire.Form == "string" && rest[0].Wire.IsZero() || !same && m.Wire.Form != "parts" || m.Wire.API == "" && rest[0].Wire.IsZero()) {
		*b = appendString(*b, rest[0].Text)
	} else {
		writeResponsesParts(b, rest, m.Role, same)
	}
	if same {
		o.extra(m.Wire.Extra)
	}
	o.close()
	return n, nil
}

func writeResponsesParts(b *[]byte, parts []Part, role Role, same bool) {
	*b = append(*b, '[')
	for i := range parts {
		if i > 0 {
			*b = append(*b, ',')
		}
		writeResponsesPart(b, &parts[i], role, same)
	}
	*b = append(*b, ']')
}

func writeResponsesPart(b *[]byte, p *Part, role Role, same bool) {
	if p.Type == Opaque {
		*b = append(*b, p.Raw...)
		return
	}
	o := openObject(b)
	switch p.Type {
	case Image:
		o.str("type", "input_image")
		url := p.ImageURL
		if url == "" {
			url = imageURLFromSource(p.Raw)
		}
		if url != "" {
			o.str("image_url", url)
		}
		switch {
		case p.Detail != "":
			o.str("detail", p.Detail)
		case !same || p.Wire.API == "" && p.Wire.Type == "":
			o.str("detail", "auto")
		}
	default:
		typ := "input_text"
		if role == Assistant {
			typ = "output_text"
		}
		if same && p.Wire.Type != "" {
			typ = p.Wire.Type
		}
		o.str("type", typ)
		o.str("text", p.Text)
	}
	if same {
		o.extra(p.Wire.Extra)
	}
	o.close()
}

func writeToolOutput(b *[]byte, p *Part, same bool) error {
	if p.ToolCallID == "" {
		return fmt.Errorf("%w: tool result without a call id", ErrEncode)
	}
	o := openObject(b)
	typ := "function_call_output"
	if same && p.Wire.Type == "custom_tool_call_output" {
		typ = p.Wire.Type
	}
	o.str("type", typ)
	o.str("call_id", p.ToolCallID)
	o.key("output")
	var content []Part
	for _, c := range p.Content {
		if c.Type == Text || c.Type == Image || c.Type == Opaque && same {
			content = append(content, c)
		}
	}
	switch {
	case len(content) == 0:
		*b = appendString(*b, "")
	case len(content) == 1 && content[0].Type == Text && (p.Wire.Form != "parts" || !same) && (content[0].Wire.IsZero() || !same):
		*b = appendString(*b, content[0].Text)
	case !same && allText(content):
		*b = appendString(*b, partText(content))
	default:
		writeResponsesParts(b, content, Tool, same)
	}
	if same {
		o.extra(p.Wire.Extra)
	}
	o.close()
	return nil
}

func allText(ps []Part) bool {
	for _, p := range ps {
		if p.Type != Text {
			return false
		}
	}
	return true
}

func partText(ps []Part) string {
	var t []string
	for _, p := range ps {
		t = append(t, p.Text)
	}
	return strings.Join(t, "\n")
}

// writeAssistantItems writes an assistant message as the items it came
// from (or, built elsewhere, as a message item for its text followed by
// its calls).
func writeAssistantItems(b *[]byte, m *Message, n int, same bool) (int, error) {
	sep := func() {
		if n > 0 {
			*b = append(*b, ',')
		}
		n++
	}
	open := false // a message item's content array is open
	var item *objw
	var itemPart *Part
	var texts int
	closeItem := func() {
		if !open {
			return
		}
		*b = append(*b, ']')
		if itemPart != nil {
			item.extra(itemPart.Wire.Item)
		}
		item.close()
		open, item, itemPart = false, nil, nil
	}
	for i := range m.Parts {
		p := &m.Parts[i]
		content := p.Type == Text || p.Type == Image || p.Type == Opaque && same && p.Wire.Form != ""
		if !same && p.Type == Opaque || p.Type == ToolResult {
			if p.Type == ToolResult {
				return n, fmt.Errorf("%w: tool result in an assistant message", ErrEncode)
			}
			continue
		}
		if content {
			starts := !open || same && (p.Wire.Form == formItem || p.Wire.Form == formItemString)
			if starts {
				closeItem()
				sep()
				item = openObject(b)
				if same && (p.Wire.Form == formItem || p.Wire.Form == formItemString) {
					itemPart = p
				}
				if itemPart == nil {
					item.str("type", "message")
				}
				item.str("role", "assistant")
				if itemPart != nil && p.Wire.Form == formItemString && p.Type == Text && !continues(m.Parts, i) {
					item.str("content", p.Text)
					item.extra(p.Wire.Item)
					item.close()
					item, itemPart = nil, nil
					continue
				}
				item.key("content")
				*b = append(*b, '[')
				open, texts = true, 0
			}
			if texts > 0 {
				*b = append(*b, ',')
			}
			texts++
			writeResponsesPart(b, p, Assistant, same)
			continue
		}
		closeItem()
		switch p.Type {
		case ToolCall:
			if p.ToolCallID == "" || p.ToolName == "" {
				return n, fmt.Errorf("%w: tool call without id or name", ErrEncode)
			}
			sep()
			o := openObject(b)
			typ, argKey := "function_call", "arguments"
			if same && p.Wire.Type == "custom_tool_call" {
				typ, argKey = p.Wire.Type, "input"
			}
			o.str("type", typ)
			o.str("call_id", p.ToolCallID)
			o.str("name", p.ToolName)
			args := p.Arguments
			if !same {
				args = unwrapRawArguments(args)
			}
			o.str(argKey, args)
			if same {
				o.extra(p.Wire.Extra)
			}
			o.close()
		case Reasoning:
			if !same || p.Wire.Type != "reasoning" && m.Wire.API != "" {
				continue // another API's thinking means nothing here
			}
			sep()
			o := openObject(b)
			o.str("type", "reasoning")
			if p.Signature != "" {
				o.str("encrypted_content", p.Signature)
			}
			extra := p.Wire.Extra
			if _, ok := extra["summary"]; !ok {
				// Required on input: written among the others, in key order,
				// so that the item encodes the same once decoded again.
				summary := []byte("[]")
				if p.Text != "" {
					summary = appendString([]byte(`[{"type":"summary_text","text":`), p.Text)
					summary = append(summary, "}]"...)
				}
				extra = make(map[string]json.RawMessage, len(p.Wire.Extra)+1)
				for k, v := range p.Wire.Extra {
					extra[k] = v
				}
				extra["summary"] = summary
			}
			o.extra(extra)
			o.close()
		case Opaque:
			sep()
			*b = append(*b, p.Raw...)
		}
	}
	closeItem()
	return n, nil
}

// continues reports whether the part after i continues the same message
// item.
func continues(ps []Part, i int) bool {
	return i+1 < len(ps) && ps[i+1].Wire.Form == formPart
}
