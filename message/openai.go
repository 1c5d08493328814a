package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The values of Wire.API.
const (
	apiOpenAI    = "openai"
	apiAnthropic = "anthropic"
)

// DecodeOpenAI decodes one OpenAI Chat Completions message object.
// Invalid input gives a *DecodeError with Index -1.
func DecodeOpenAI(data []byte) (Message, error) {
	return decodeOne(data, decodeOpenAIMessage)
}

// DecodeOpenAIMessages decodes the "messages" array of an OpenAI Chat
// Completions request. Invalid input gives a *DecodeError naming the
// message and the field.
func DecodeOpenAIMessages(data []byte) ([]Message, error) {
	s := scanner{data: data}
	return decodeList(&s, decodeOpenAIMessage)
}

// decodeOne decodes data, one message object and nothing after it, with
// decode. Errors are a *DecodeError with Index -1.
func decodeOne(data []byte, decode func(*scanner) (Message, error)) (Message, error) {
	s := scanner{data: data}
	m, err := decode(&s)
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return Message{}, atIndex(err, -1)
	}
	return m, nil
}

// decodeList decodes a JSON array of messages with decode.
func decodeList(s *scanner, decode func(*scanner) (Message, error)) ([]Message, error) {
	if s.peek() != '[' {
		return nil, &DecodeError{Index: -1, Field: "messages", Msg: "want an array of messages"}
	}
	var out []Message
	idx := -1
	err := s.array(func(i int) error {
		idx = i
		m, err := decode(s)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	return endList(s, out, idx, err)
}

// endList ends a list decoded up to element idx with err: the array's
// end when every element decoded, the element's index and the field
// "messages" on an error.
func endList(s *scanner, out []Message, idx int, err error) ([]Message, error) {
	if err == nil {
		idx = -1
		err = s.end()
	}
	if err != nil {
		err = atIndex(err, idx)
		if de := err.(*DecodeError); de.Index < 0 && de.Field == "" {
			de.Field = "messages"
		}
		return nil, err
	}
	return out, nil
}

func index(i int) string { return "[" + strconv.Itoa(i) + "]" }

// decodeOpenAIMessage decodes the message object at the scanner.
func decodeOpenAIMessage(s *scanner) (Message, error) {
	var (
		m                                  Message
		role                               string
		hasRole                            bool
		content                            []Part
		ms                                 []member // role-dependent and unknown members, in order
		name, toolCallID, reasoningContent strVal
		calls                              []Part
		callsErr                           error
	)
	err := s.object(func(k []byte) error {
		key := keyName(k)
		switch key {
		case "role":
			r, err := s.str()
			if err != nil {
				return under(err, "role")
			}
			role, hasRole = r, true
			return nil
		case "content":
			var err error
			content, m.Wire.Form, err = decodeContent(s, decodeOpenAIPart)
			return under(err, "content")
		case "tool_calls":
			calls = nil
			raw, shape, err := s.try(func() error {
				var err error
				calls, err = decodeOpenAIToolCalls(s)
				return err
			})
			callsErr = shape
			ms = append(ms, member{key: key, raw: raw})
			return err
		case "name", "tool_call_id", "reasoning_content":
			sv := &name
			if key == "tool_call_id" {
				sv = &toolCallID
			} else if key == "reasoning_content" {
				sv = &reasoningContent
			}
			var raw []byte
			var err error
			sv.v, raw, sv.ok, err = s.strField()
			sv.has = true
			ms = append(ms, member{key: key, raw: raw})
			return err
		default:
			raw, err := s.skip()
			ms = append(ms, member{key: key, raw: raw})
			return err
		}
	})
	if err != nil {
		return Message{}, err
	}
	if !hasRole {
		return Message{}, fieldErr("role", "missing")
	}
	switch role {
	case "system", "user", "assistant", "tool":
		m.Role = Role(role)
	case "developer":
		m.Role, m.Wire.Role = System, role
	default:
		return Message{}, fieldErr("role", fmt.Sprintf("unknown role %q", role))
	}
	m.Wire.API = apiOpenAI

	// A member the Message models only for some roles, or only for some
	// values (a name of "" cannot be told from no name), is kept in Extra.
	var known []string
	if name.ok && name.v != "" {
		m.Name = name.v
		known = append(known, "name")
	}
	var callID string
	if m.Role == Tool {
		switch {
		case toolCallID.ok && toolCallID.v != "":
			callID = toolCallID.v
			known = append(known, "tool_call_id")
		case toolCallID.has && !toolCallID.ok && !isNull(lastRaw(ms, "tool_call_id")):
			return Message{}, fieldErr("tool_call_id", "want string")
		default:
			return Message{}, fieldErr("tool_call_id", "missing")
		}
	}
	var reasoning *Part
	if m.Role == Assistant {
		if reasoningContent.ok {
			reasoning = &Part{Type: Reasoning, Text: reasoningContent.v}
			known = append(known, "reasoning_content")
		}
		if hasMember(ms, "tool_calls") {
			raw := lastRaw(ms, "tool_calls")
			switch {
			case callsErr != nil && !isNull(raw):
				return Message{}, under(callsErr, "tool_calls")
			case len(calls) > 0:
				known = append(known, "tool_calls")
			}
		}
	}
	m.Wire.Extra = extraOf(ms, known...)

	switch m.Role {
	case Tool:
		m.Parts = []Part{{Type: ToolResult, ToolCallID: callID, ToolName: m.Name, Content: content}}
	case Assistant:
		n := len(content) + len(calls)
		if reasoning != nil {
			n++
		}
		if n > 0 {
			m.Parts = make([]Part, 0, n)
		}
		if reasoning != nil {
			m.Parts = append(m.Parts, *reasoning)
		}
		m.Parts = append(m.Parts, content...)
		m.Parts = append(m.Parts, calls...)
	default:
		m.Parts = content
	}
	return m, nil
}

func hasMember(ms []member, key string) bool {
	for _, m := range ms {
		if m.key == key {
			return true
		}
	}
	return false
}

func lastRaw(ms []member, key string) []byte {
	var raw []byte
	for _, m := range ms {
		if m.key == key {
			raw = m.raw
		}
	}
	return raw
}

func isNull(raw []byte) bool { return string(raw) == "null" }

// decodeContent decodes content that is a string, an array of parts, each
// decoded with part, or null, and says how it was spelled: "string",
// "parts" or "null". Both APIs spell content so.
func decodeContent(s *scanner, part func(*scanner) (Part, error)) ([]Part, string, error) {
	switch s.peek() {
	case '"':
		t, err := s.str()
		return []Part{{Type: Text, Text: t}}, "string", err
	case 'n':
		return nil, "null", s.literal("null")
	case '[':
		var parts []Part
		err := s.array(func(i int) error {
			p, err := part(s)
			if err != nil {
				return under(err, index(i))
			}
			parts = append(parts, p)
			return nil
		})
		return parts, "parts", err
	}
	if s.pos >= len(s.data) {
		return nil, "", s.fail("unexpected end of input")
	}
	return nil, "", fieldErr("", "want string, array or null")
}

// decodeOpenAIPart decodes one content part: text, image_url, or anything
// else kept byte-exact as Opaque.
func decodeOpenAIPart(s *scanner) (Part, error) {
	s.ws()
	start := s.pos
	var (
		ms                       []member
		typ, text                string
		hasType, hasText, hasImg bool
		typeOK, textOK           bool
		img                      imageURL
		imgErr                   error
	)
	err := s.object(func(k []byte) error {
		key := keyName(k)
		var raw []byte
		var err error
		switch key {
		case "type":
			typ, raw, typeOK, err = s.strField()
			hasType = true
		case "text":
			text, raw, textOK, err = s.strField()
			hasText = true
		case "image_url":
			raw, imgErr, err = s.try(func() error {
				var e error
				img, e = decodeImageURL(s)
				return e
			})
			hasImg = true
		default:
			raw, err = s.skip()
		}
		ms = append(ms, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return Part{}, err
	}
	switch {
	case !hasType:
		return Part{}, fieldErr("type", "missing")
	case !typeOK:
		return Part{}, fieldErr("type", "want string")
	}
	switch typ {
	case "text":
		switch {
		case !hasText:
			return Part{}, fieldErr("text", "missing")
		case !textOK:
			return Part{}, fieldErr("text", "want string")
		}
		return Part{Type: Text, Text: text, Wire: Wire{Extra: extraOf(ms, "type", "text")}}, nil
	case "image_url":
		switch {
		case !hasImg:
			return Part{}, fieldErr("image_url", "missing")
		case imgErr != nil:
			return Part{}, under(imgErr, "image_url")
		}
		p := Part{Type: Image, ImageURL: img.url, Detail: img.detail}
		p.Wire.Extra = extraOf(ms, "type", "image_url")
		if img.str {
			p.Wire.Form = "string"
		}
		if inner := objectOf(img.inner); inner != nil {
			if p.Wire.Extra == nil {
				p.Wire.Extra = make(map[string]json.RawMessage, 1)
			}
			p.Wire.Extra["image_url"] = inner
		}
		return p, nil
	}
	return Part{Type: Opaque, Raw: bytes.Clone(s.data[start:s.pos]), Wire: Wire{Type: typ}}, nil
}

// imageURL is the image_url member of an OpenAI image part: an object with
// url and detail, or (as some clients send it) a bare URL string.
type imageURL struct {
	url, detail string
	inner       []member // members not modeled, kept in Wire.Extra["image_url"]
	str         bool     // sent as a bare string
}

func decodeImageURL(s *scanner) (imageURL, error) {
	var img imageURL
	if s.peek() == '"' {
		u, err := s.str()
		return imageURL{url: u, str: true}, err
	}
	hasURL := false
	err := s.object(func(k []byte) error {
		key := keyName(k)
		switch key {
		case "url":
			u, err := s.str()
			if err != nil {
				return under(err, "url")
			}
			img.url, hasURL = u, true
			return nil
		case "detail":
			d, raw, ok, err := s.strField()
			img.detail = ""
			if ok {
				img.detail = d
			}
			img.inner = append(img.inner, member{key: key, raw: raw})
			return err
		}
		raw, err := s.skip()
		img.inner = append(img.inner, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return img, err
	}
	if !hasURL {
		return img, fieldErr("url", "missing")
	}
	// A detail of "" (or not a string) cannot be told from none: it stays
	// with the unmodeled members.
	if img.detail != "" {
		img.inner = dropKey(img.inner, "detail")
	}
	return img, nil
}

func decodeOpenAIToolCalls(s *scanner) ([]Part, error) {
	var calls []Part
	err := s.array(func(i int) error {
		p, err := decodeOpenAIToolCall(s)
		if err != nil {
			return under(err, index(i))
		}
		calls = append(calls, p)
		return nil
	})
	return calls, err
}

// callFunc is the "function" (or "custom") member of an OpenAI tool call.
type callFunc struct {
	name, args string
	json       bool     // the arguments came as a JSON value, not a string
	inner      []member // members not modeled
}

func decodeOpenAIToolCall(s *scanner) (Part, error) {
	var (
		ms              []member
		id, typ         string
		hasID, idOK     bool
		hasType, typeOK bool
		fn, cu          callFunc
		hasFn, hasCu    bool
		fnErr, cuErr    error
	)
	err := s.object(func(k []byte) error {
		key := keyName(k)
		var raw []byte
		var err error
		switch key {
		case "id":
			id, raw, idOK, err = s.strField()
			hasID = true
		case "type":
			typ, raw, typeOK, err = s.strField()
			hasType = true
		case "function":
			raw, fnErr, err = s.try(func() error {
				var e error
				fn, e = decodeCallFunc(s, "arguments")
				return e
			})
			hasFn = true
		case "custom":
			raw, cuErr, err = s.try(func() error {
				var e error
				cu, e = decodeCallFunc(s, "input")
				return e
			})
			hasCu = true
		default:
			raw, err = s.skip()
		}
		ms = append(ms, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return Part{}, err
	}
	switch {
	case !hasID || idOK && id == "":
		return Part{}, fieldErr("id", "missing")
	case !idOK:
		return Part{}, fieldErr("id", "want string")
	case hasType && !typeOK:
		return Part{}, fieldErr("type", "want string")
	}
	kind := "function"
	if hasType {
		kind = typ
	}
	var f callFunc
	p := Part{Type: ToolCall, ToolCallID: id}
	switch kind {
	case "function":
		switch {
		case !hasFn:
			return Part{}, fieldErr("function", "missing")
		case fnErr != nil:
			return Part{}, under(fnErr, "function")
		}
		f = fn
	case "custom":
		switch {
		case !hasCu:
			return Part{}, fieldErr("custom", "missing")
		case cuErr != nil:
			return Part{}, under(cuErr, "custom")
		}
		f = cu
		p.Wire.Type = kind
	default:
		return Part{}, fieldErr("type", fmt.Sprintf("unsupported tool call type %q", kind))
	}
	p.ToolName, p.Arguments = f.name, f.args
	if f.json {
		p.Wire.Form = "json"
	}
	p.Wire.Extra = extraOf(ms, "id", "type", kind)
	if inner := objectOf(f.inner); inner != nil {
		if p.Wire.Extra == nil {
			p.Wire.Extra = make(map[string]json.RawMessage, 1)
		}
		p.Wire.Extra[kind] = inner
	}
	return p, nil
}

// decodeCallFunc decodes {name, <argKey>}: the arguments string, or (as
// some clients send them) the arguments as a JSON value.
func decodeCallFunc(s *scanner, argKey string) (callFunc, error) {
	var f callFunc
	argsNull := false
	err := s.object(func(k []byte) error {
		key := keyName(k)
		switch key {
		case "name":
			n, err := s.str()
			f.name = n
			return under(err, "name")
		case argKey:
			f.args, f.json, argsNull = "", false, false
			switch s.peek() {
			case '"':
				a, err := s.str()
				f.args = a
				return err
			case 'n':
				argsNull = true
				raw, err := s.skip()
				f.inner = append(f.inner, member{key: key, raw: raw})
				return err
			}
			raw, err := s.skip()
			f.args, f.json = string(raw), true
			return err
		}
		raw, err := s.skip()
		f.inner = append(f.inner, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return f, err
	}
	if f.name == "" {
		return f, fieldErr("name", "missing")
	}
	if !argsNull { // a null stays with the unmodeled members
		f.inner = dropKey(f.inner, argKey)
	}
	return f, nil
}

// EncodeOpenAI encodes one Message as OpenAI Chat Completions messages.
// Usually that is one message; a user message carrying tool results (as
// Anthropic sends them) becomes one "tool" message per result followed by a
// user message with the other parts, if any.
func EncodeOpenAI(m Message) ([]json.RawMessage, error) {
	units, err := openAIUnits(m)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(units))
	for _, u := range units {
		var b []byte
		if err := writeOpenAIUnit(&b, m, u); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// EncodeOpenAIMessages encodes ms as the "messages" array of an OpenAI Chat
// Completions request.
func EncodeOpenAIMessages(ms []Message) (json.RawMessage, error) {
	b := make([]byte, 0, encodedSize(ms))
	b = append(b, '[')
	n := 0
	for i, m := range ms {
		units, err := openAIUnits(m)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		for _, u := range units {
			if n > 0 {
				b = append(b, ',')
			}
			n++
			if err := writeOpenAIUnit(&b, m, u); err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
		}
	}
	return append(b, ']'), nil
}

// openAIUnit is one OpenAI message to write for a Message: the message
// itself (result nil) with parts, or a tool message for one result.
type openAIUnit struct {
	parts  []Part
	result *Part
}

func openAIUnits(m Message) ([]openAIUnit, error) {
	if !m.Role.Valid() {
		return nil, fmt.Errorf("%w: invalid role %q", ErrEncode, m.Role)
	}
	var units []openAIUnit
	var rest []Part
	for i := range m.Parts {
		p := &m.Parts[i]
		switch {
		case p.Type == ToolResult && (m.Role == Tool || m.Role == User):
			units = append(units, openAIUnit{result: p})
		case p.Type == ToolResult:
			return nil, fmt.Errorf("%w: tool result in a %s message", ErrEncode, m.Role)
		case m.Role == Tool:
			return nil, fmt.Errorf("%w: %s part in a tool message", ErrEncode, p.Type)
		default:
			rest = append(rest, *p)
		}
	}
	if m.Role == Tool {
		if len(units) == 0 {
			return nil, fmt.Errorf("%w: tool message without a tool result", ErrEncode)
		}
		return units, nil
	}
	if len(units) == 0 {
		return []openAIUnit{{parts: m.Parts}}, nil
	}
	// OpenAI tool messages take text only: images a foreign tool result
	// carries move to the user message that follows the results.
	if m.Wire.API != apiOpenAI {
		for _, u := range units {
			for _, c := range u.result.Content {
				if c.Type == Image {
					rest = append(rest, c)
				}
			}
		}
	}
	if len(rest) > 0 {
		units = append(units, openAIUnit{parts: rest})
	}
	return units, nil
}

// writeOpenAIUnit writes one OpenAI message for m. Wire details (forms,
// unknown fields, role spelling) are used only when m came from OpenAI or
// was built in Go (Wire.API ""); an Anthropic-decoded message is written in
// the canonical OpenAI shape and its Anthropic-only parts (thinking,
// opaque blocks) are left out, since OpenAI would reject them.
func writeOpenAIUnit(b *[]byte, m Message, u openAIUnit) error {
	same := m.Wire.API == apiOpenAI || m.Wire.API == ""
	o := openObject(b)
	if u.result != nil {
		r := u.result
		if r.ToolCallID == "" {
			return fmt.Errorf("%w: tool result without tool_call_id", ErrEncode)
		}
		o.str("role", "tool")
		if m.Role == Tool && same && (m.Wire.API == apiOpenAI || m.Wire.Form != "") {
			writeOpenAIContent(o, m.Wire.Form, r.Content, same)
		} else {
			var texts []Part
			for _, c := range r.Content {
				if c.Type == Text {
					texts = append(texts, c)
				}
			}
			writeCanonicalOpenAIContent(o, texts, same, false)
		}
		o.str("tool_call_id", r.ToolCallID)
		if m.Role == Tool && m.Name != "" {
			o.str("name", m.Name)
		}
		if m.Role == Tool && same {
			o.extra(m.Wire.Extra)
		}
		o.close()
		return nil
	}

	role := string(m.Role)
	if same && m.Wire.Role != "" {
		role = m.Wire.Role
	}
	o.str("role", role)
	var content, calls []Part
	var reasoning []string
	for _, p := range u.parts {
		switch p.Type {
		case ToolCall:
			calls = append(calls, p)
		case Reasoning:
			if m.Wire.API == apiOpenAI && p.Wire.Type == "" && p.Signature == "" {
				reasoning = append(reasoning, p.Text)
			}
		case Opaque:
			if same {
				content = append(content, p)
			}
		case Image:
			if same || p.ImageURL != "" || imageURLFromSource(p.Raw) != "" {
				content = append(content, p)
			}
		default:
			content = append(content, p)
		}
	}
	if same && (m.Wire.API == apiOpenAI || m.Wire.Form != "") {
		writeOpenAIContent(o, m.Wire.Form, content, same)
	} else {
		writeCanonicalOpenAIContent(o, content, same, m.Role == Assistant && len(calls) > 0)
	}
	if m.Name != "" {
		o.str("name", m.Name)
	}
	if reasoning != nil {
		o.str("reasoning_content", strings.Join(reasoning, ""))
	}
	if len(calls) > 0 {
		o.key("tool_calls")
		*b = append(*b, '[')
		for i, c := range calls {
			if i > 0 {
				*b = append(*b, ',')
			}
			if err := writeOpenAIToolCall(b, c, same); err != nil {
				return err
			}
		}
		*b = append(*b, ']')
	}
	if same {
		o.extra(m.Wire.Extra)
	}
	o.close()
	return nil
}

// writeOpenAIContent writes content in the form it came in: "string",
// "parts", "null" or "" (absent). Parts that no longer fit the form (a
// window replaced a string with several parts) are written as an array.
func writeOpenAIContent(o *objw, form string, parts []Part, same bool) {
	switch {
	case form == "string" && len(parts) == 1 && isPlainText(parts[0]):
		o.str("content", parts[0].Text)
	case len(parts) == 0 && form == "null":
		o.raw("content", []byte("null"))
	case len(parts) == 0 && form == "":
	case len(parts) == 0 && form == "string":
		o.str("content", "")
	default:
		o.key("content")
		writeOpenAIParts(o.b, parts, same)
	}
}

// writeCanonicalOpenAIContent writes content the way OpenAI's own clients
// do: a single text as a string, nothing as null (assistant with tool calls)
// or "", anything else as an array of parts.
func writeCanonicalOpenAIContent(o *objw, parts []Part, same, nullIfEmpty bool) {
	switch {
	case len(parts) == 1 && parts[0].Type == Text && (!same || parts[0].Wire.IsZero()):
		o.str("content", parts[0].Text)
	case len(parts) == 0 && nullIfEmpty:
		o.raw("content", []byte("null"))
	case len(parts) == 0:
		o.str("content", "")
	default:
		o.key("content")
		writeOpenAIParts(o.b, parts, same)
	}
}

func isPlainText(p Part) bool { return p.Type == Text && p.Wire.IsZero() }

func writeOpenAIParts(b *[]byte, parts []Part, same bool) {
	*b = append(*b, '[')
	for i, p := range parts {
		if i > 0 {
			*b = append(*b, ',')
		}
		writeOpenAIPart(b, p, same)
	}
	*b = append(*b, ']')
}

// writeOpenAIPart writes one content part. Callers have dropped the parts
// OpenAI cannot take (foreign opaque parts, images without a URL).
func writeOpenAIPart(b *[]byte, p Part, same bool) {
	if p.Type == Opaque {
		*b = append(*b, p.Raw...)
		return
	}
	o := openObject(b)
	switch p.Type {
	case Image:
		o.str("type", "image_url")
		url := p.ImageURL
		if url == "" {
			url = imageURLFromSource(p.Raw)
		}
		if same && p.Wire.Form == "string" {
			o.str("image_url", url)
			break
		}
		o.key("image_url")
		io := openObject(b)
		io.str("url", url)
		if p.Detail != "" {
			io.str("detail", p.Detail)
		}
		if same {
			io.members(p.Wire.Extra["image_url"])
		}
		io.close()
	default: // Text, and anything that is not content
		o.str("type", "text")
		o.str("text", p.Text)
	}
	if same {
		o.extra(p.Wire.Extra)
	}
	o.close()
}

// writeOpenAIToolCall writes one entry of tool_calls.
func writeOpenAIToolCall(b *[]byte, p Part, same bool) error {
	if p.ToolCallID == "" || p.ToolName == "" {
		return fmt.Errorf("%w: tool call without id or name", ErrEncode)
	}
	kind := "function"
	if same && p.Wire.Type == "custom" {
		kind = "custom"
	}
	o := openObject(b)
	o.str("id", p.ToolCallID)
	o.str("type", kind)
	o.key(kind)
	fo := openObject(b)
	fo.str("name", p.ToolName)
	argKey := "arguments"
	if kind == "custom" {
		argKey = "input"
	}
	switch {
	case !same:
		fo.str(argKey, unwrapRawArguments(p.Arguments))
	case p.Wire.Form == "json" && validJSON([]byte(p.Arguments)):
		fo.raw(argKey, []byte(p.Arguments))
	case p.Arguments != "" || !hasKey(p.Wire.Extra[kind], argKey):
		fo.str(argKey, p.Arguments)
	}
	if same {
		fo.members(p.Wire.Extra[kind])
	}
	fo.close()
	if same {
		o.extra(p.Wire.Extra)
	}
	o.close()
	return nil
}

// hasKey reports whether the JSON object obj has a member key.
func hasKey(obj []byte, key string) bool {
	if len(obj) == 0 {
		return false
	}
	found := false
	s := scanner{data: obj}
	_ = s.object(func(k []byte) error {
		if string(k) == key {
			found = true
		}
		_, err := s.skip()
		return err
	})
	return found
}
