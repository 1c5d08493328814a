package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// DecodeAnthropic decodes one Anthropic Messages message object.
// Invalid input gives a *DecodeError with Index -1.
func DecodeAnthropic(data []byte) (Message, error) {
	return decodeOne(data, decodeAnthropicMessage)
}

// DecodeAnthropicMessages decodes the "messages" array of an Anthropic
// Messages request. Invalid input gives a *DecodeError naming the message
// and the field.
func DecodeAnthropicMessages(data []byte) ([]Message, error) {
	s := scanner{data: data}
	return decodeList(&s, decodeAnthropicMessage)
}

// DecodeAnthropicSystem decodes the "system" field of an Anthropic Messages
// request (a string, or an array of text blocks that may carry
// cache_control) into System messages: none for an absent or null field,
// else one message holding the text as sent. EncodeAnthropicMessages gives
// it back.
func DecodeAnthropicSystem(raw json.RawMessage) ([]Message, error) {
	s := scanner{data: raw}
	m := Message{Role: System, Wire: Wire{API: apiAnthropic}}
	var err error
	switch s.peek() {
	case 0:
		if s.pos >= len(raw) {
			return nil, nil
		}
		err = s.fail("invalid character '\\x00'")
	case 'n':
		if err = s.literal("null"); err == nil {
			if err = s.end(); err == nil {
				return nil, nil
			}
		}
	case '"':
		m.Parts, m.Wire.Form, err = decodeAnthropicContent(&s, false)
	case '[':
		m.Parts, m.Wire.Form, err = decodeAnthropicContent(&s, false)
	default:
		err = fieldErr("", "want string or array of text blocks")
	}
	if err == nil {
		err = s.end()
	}
	if err != nil {
		err = atIndex(under(err, "system"), -1)
		if de := err.(*DecodeError); de.Field == "" {
			de.Field = "system"
		}
		return nil, err
	}
	return []Message{m}, nil
}

// anthropicInline is the Wire.Role of a system message that stood inside
// an Anthropic request's messages (a mid-conversation system message), as
// opposed to the request's system field.
const anthropicInline = "system"

// decodeAnthropicMessage decodes the message object at the scanner.
func decodeAnthropicMessage(s *scanner) (Message, error) {
	var (
		m       Message
		role    string
		hasRole bool
		ms      []member
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
			m.Parts, m.Wire.Form, err = decodeAnthropicContent(s, false)
			return under(err, "content")
		}
		raw, err := s.skip()
		ms = append(ms, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return Message{}, err
	}
	switch {
	case !hasRole:
		return Message{}, fieldErr("role", "missing")
	case role == "user" || role == "assistant":
		m.Role = Role(role)
	case role == "system":
		// A mid-conversation system message (Claude Code's agent and skill
		// lists, reminders): kept where it stands, marked so that it is
		// written back among the messages and not moved to the system field.
		m.Role, m.Wire.Role = System, anthropicInline
	default:
		return Message{}, fieldErr("role", fmt.Sprintf("unknown role %q", role))
	}
	m.Wire.API = apiAnthropic
	m.Wire.Extra = extraOf(ms)
	return m, nil
}

// decodeAnthropicContent decodes content that is a string or an array of
// blocks (or null), and says which. nested is set for the content of a
// block: blocks there do not nest further.
func decodeAnthropicContent(s *scanner, nested bool) ([]Part, string, error) {
	return decodeContent(s, func(s *scanner) (Part, error) { return decodeAnthropicBlock(s, nested) })
}

// strVal is a string member of a block: whether it was there, and whether
// it was a string.
type strVal struct {
	v       string
	has, ok bool
}

// decodeAnthropicBlock decodes one content block. The members a block type
// models are decoded as they are met, before the type may be known, so a
// block is read once; a member of the wrong shape only matters if the type
// turns out to model it.
func decodeAnthropicBlock(s *scanner, nested bool) (Part, error) {
	s.ws()
	start := s.pos
	var (
		ms                                                  []member
		typ, text, id, name, toolUseID, thinking, signature strVal
		content                                             []Part
		contentForm                                         string
		contentErr, sourceErr                               error
		source                                              anthropicSource
	)
	err := s.object(func(k []byte) error {
		key := keyName(k)
		var sv *strVal
		switch key {
		case "type":
			sv = &typ
		case "text":
			sv = &text
		case "id":
			sv = &id
		case "name":
			sv = &name
		case "tool_use_id":
			sv = &toolUseID
		case "thinking":
			sv = &thinking
		case "signature":
			sv = &signature
		}
		var raw []byte
		var err error
		switch {
		case sv != nil:
			sv.v, raw, sv.ok, err = s.strField()
			sv.has = true
		case key == "content" && !nested:
			raw, contentErr, err = s.try(func() error {
				var e error
				content, contentForm, e = decodeAnthropicContent(s, true)
				return e
			})
		case key == "source":
			raw, sourceErr, err = s.try(func() error {
				var e error
				source, e = decodeAnthropicSource(s)
				return e
			})
		default:
			raw, err = s.skip()
		}
		ms = append(ms, member{key: key, raw: raw})
		return err
	})
	if err != nil {
		return Part{}, err
	}
	if err := need(typ, "type", false); err != nil {
		return Part{}, err
	}
	var p Part
	known := []string{"type"}
	switch typ.v {
	case "text":
		if err := need(text, "text", false); err != nil {
			return Part{}, err
		}
		p = Part{Type: Text, Text: text.v}
		known = append(known, "text")
	case "image":
		switch {
		case !hasMember(ms, "source"):
			return Part{}, fieldErr("source", "missing")
		case sourceErr != nil:
			return Part{}, under(sourceErr, "source")
		}
		p = Part{Type: Image, Raw: bytes.Clone(lastRaw(ms, "source"))}
		if source.typ == "url" {
			p.ImageURL = source.url
		}
		known = append(known, "source")
	case "tool_use":
		if err := need(id, "id", true); err != nil {
			return Part{}, err
		}
		if err := need(name, "name", true); err != nil {
			return Part{}, err
		}
		p = Part{Type: ToolCall, ToolCallID: id.v, ToolName: name.v, Arguments: string(lastRaw(ms, "input"))}
		known = append(known, "id", "name", "input")
	case "tool_result":
		if nested {
			break // not valid inside a block: kept opaque
		}
		if err := need(toolUseID, "tool_use_id", true); err != nil {
			return Part{}, err
		}
		if hasMember(ms, "content") && contentErr != nil {
			return Part{}, under(contentErr, "content")
		}
		p = Part{Type: ToolResult, ToolCallID: toolUseID.v, Content: content}
		p.Wire.Form = contentForm
		known = append(known, "tool_use_id", "content")
		if string(lastRaw(ms, "is_error")) == "true" {
			p.IsError = true
			known = append(known, "is_error")
		}
	case "thinking":
		if err := need(thinking, "thinking", false); err != nil {
			return Part{}, err
		}
		p = Part{Type: Reasoning, Text: thinking.v}
		known = append(known, "thinking")
		if signature.ok && signature.v != "" {
			p.Signature = signature.v
			known = append(known, "signature")
		}
	case "redacted_thinking":
		p = Part{Type: Reasoning, Raw: bytes.Clone(lastRaw(ms, "data"))}
		p.Wire.Type = typ.v
		known = append(known, "data")
	}
	if p.Type == "" {
		return Part{Type: Opaque, Raw: bytes.Clone(s.data[start:s.pos]), Wire: Wire{Type: typ.v}}, nil
	}
	p.Wire.Extra = extraOf(ms, known...)
	return p, nil
}

// need checks a required string member of a block.
func need(v strVal, field string, nonEmpty bool) error {
	switch {
	case !v.has:
		return fieldErr(field, "missing")
	case !v.ok:
		return fieldErr(field, "want string")
	case nonEmpty && v.v == "":
		return fieldErr(field, "missing")
	}
	return nil
}

// anthropicSource is what the codec reads of an image block's source; the
// source itself is kept byte-exact in Part.Raw.
type anthropicSource struct {
	typ, mediaType, data, url, fileID string
}

func decodeAnthropicSource(s *scanner) (anthropicSource, error) {
	var src anthropicSource
	err := s.object(func(k []byte) error {
		var dst *string
		switch string(k) {
		case "type":
			dst = &src.typ
		case "media_type":
			dst = &src.mediaType
		case "data":
			dst = &src.data
		case "url":
			dst = &src.url
		case "file_id":
			dst = &src.fileID
		default:
			_, err := s.skip()
			return err
		}
		v, _, _, err := s.strField()
		*dst = v
		return err
	})
	return src, err
}

// EncodeAnthropic encodes one Message as an Anthropic Messages message. A
// tool message (as OpenAI sends them) becomes a user message of tool_result
// blocks; a System message becomes a mid-conversation system message
// ({"role":"system"}): EncodeAnthropicMessages is what moves the leading
// system prompt to the request's system field.
func EncodeAnthropic(m Message) (json.RawMessage, error) {
	var b []byte
	if err := writeAnthropicMessage(&b, m); err != nil {
		return nil, err
	}
	return b, nil
}

// EncodeAnthropicMessages encodes ms for an Anthropic Messages request: the
// System messages that lead ms become the request's system field (a string
// or text blocks; nil when there are none), the others its messages array,
// with consecutive tool messages merged into one user message of
// tool_result blocks. A System message that stands after the conversation
// began, or that came from inside an Anthropic messages array, is written
// where it stands as a mid-conversation system message.
func EncodeAnthropicMessages(ms []Message) (system json.RawMessage, msgs json.RawMessage, err error) {
	var sys []Message
	b := make([]byte, 0, encodedSize(ms))
	b = append(b, '[')
	n := 0
	for i := 0; i < len(ms); i++ {
		m := ms[i]
		if m.Role == System && n == 0 && !isAnthropicInline(m) {
			sys = append(sys, m)
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		if m.Role != Tool {
			if err := writeAnthropicMessage(&b, m); err != nil {
				return nil, nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			continue
		}
		j := i
		for j+1 < len(ms) && ms[j+1].Role == Tool {
			j++
		}
		if err := writeAnthropicToolResults(&b, ms[i:j+1]); err != nil {
			return nil, nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		i = j
	}
	b = append(b, ']')
	system, err = encodeAnthropicSystem(sys)
	if err != nil {
		return nil, nil, fmt.Errorf("system: %w", err)
	}
	return system, b, nil
}

// writeAnthropicToolResults writes tool messages as one user message of
// tool_result blocks.
func writeAnthropicToolResults(b *[]byte, run []Message) error {
	o := openObject(b)
	o.str("role", "user")
	o.key("content")
	*b = append(*b, '[')
	n := 0
	for _, m := range run {
		for _, p := range m.Parts {
			if p.Type != ToolResult {
				return fmt.Errorf("%w: %s part in a tool message", ErrEncode, p.Type)
			}
			if n > 0 {
				*b = append(*b, ',')
			}
			n++
			if err := writeAnthropicBlock(b, p, m.Wire.API); err != nil {
				return err
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: tool message without a tool result", ErrEncode)
	}
	*b = append(*b, ']')
	o.close()
	return nil
}

// isAnthropicInline reports whether m is a system message decoded from
// inside an Anthropic messages array.
func isAnthropicInline(m Message) bool {
	return m.Role == System && m.Wire.API == apiAnthropic && m.Wire.Role == anthropicInline
}

func writeAnthropicMessage(b *[]byte, m Message) error {
	role := "user"
	switch m.Role {
	case System:
		role = "system"
	case Tool:
		return writeAnthropicToolResults(b, []Message{m})
	case Assistant:
		role = "assistant"
	case User:
	default:
		return fmt.Errorf("%w: invalid role %q", ErrEncode, m.Role)
	}
	o := openObject(b)
	o.str("role", role)
	if err := writeAnthropicContent(o, "content", m.Wire, m.Parts, m.Wire.API, false); err != nil {
		return err
	}
	if m.Wire.API == apiAnthropic || m.Wire.API == "" {
		o.extra(m.Wire.Extra)
	}
	o.close()
	return nil
}

// encodeAnthropicSystem writes the System messages as the request's system
// field: as it came when it is one Anthropic-decoded field, else a string
// for a single text and text blocks for anything more.
func encodeAnthropicSystem(sys []Message) (json.RawMessage, error) {
	if len(sys) == 0 {
		return nil, nil
	}
	var b []byte
	o := openObject(&b) // a scratch object: the value is cut out below
	if len(sys) == 1 {
		m := sys[0]
		if err := writeAnthropicContent(o, "s", m.Wire, m.Parts, m.Wire.API, false); err != nil {
			return nil, err
		}
	} else {
		o.key("s")
		b = append(b, '[')
		n := 0
		for _, m := range sys {
			for _, p := range m.Parts {
				if !anthropicKeeps(p, m.Wire.API) {
					continue
				}
				if n > 0 {
					b = append(b, ',')
				}
				n++
				if err := writeAnthropicBlock(&b, p, m.Wire.API); err != nil {
					return nil, err
				}
			}
		}
		b = append(b, ']')
	}
	const prefix = `{"s":`
	if len(b) <= len(prefix) { // absent
		return nil, nil
	}
	return b[len(prefix):], nil
}

// anthropicKeeps reports whether part p of a message that came from api can
// be written for Anthropic. OpenAI's reasoning (no signature) and opaque
// parts, and empty texts (which Anthropic rejects), are left out of a
// translation.
func anthropicKeeps(p Part, api string) bool {
	if api == apiAnthropic || api == "" {
		switch p.Type {
		case Image:
			return len(p.Raw) > 0 || p.ImageURL != ""
		case Reasoning:
			return api == apiAnthropic || p.Signature != "" || p.Wire.Type == "redacted_thinking"
		}
		return true
	}
	switch p.Type {
	case Text:
		return p.Text != ""
	case Image:
		return p.ImageURL != ""
	case ToolCall, ToolResult:
		return true
	}
	return false
}

// plainAnthropicText reports whether p would be written as a bare
// {"type":"text","text":...} block, so that a content of that block alone
// may be a string.
func plainAnthropicText(p Part, api string) bool {
	if p.Type != Text {
		return false
	}
	if api == apiAnthropic || api == "" {
		return p.Wire.IsZero()
	}
	_, cc := p.Wire.Extra["cache_control"]
	return !cc
}

// writeAnthropicContent writes key: the parts as a string or blocks. The
// form they came in (w.Form) is kept for Anthropic-decoded content; other
// content gets the canonical form: a single text as a string, otherwise
// blocks; nothing is absent in a tool_result and "" elsewhere.
func writeAnthropicContent(o *objw, key string, w Wire, parts []Part, api string, inResult bool) error {
	keep := parts
	for _, p := range parts {
		if !anthropicKeeps(p, api) { // copy only when something is left out
			keep = make([]Part, 0, len(parts))
			for _, q := range parts {
				if anthropicKeeps(q, api) {
					keep = append(keep, q)
				}
			}
			break
		}
	}
	if api == apiAnthropic || api == "" && w.Form != "" {
		switch {
		case w.Form == "string" && len(keep) == 1 && plainAnthropicText(keep[0], api):
			o.str(key, keep[0].Text)
			return nil
		case len(keep) == 0 && w.Form == "null":
			o.raw(key, []byte("null"))
			return nil
		case len(keep) == 0 && w.Form == "":
			return nil
		case len(keep) == 0 && w.Form == "string":
			o.str(key, "")
			return nil
		}
	} else {
		switch {
		case len(keep) == 1 && plainAnthropicText(keep[0], api):
			o.str(key, keep[0].Text)
			return nil
		case len(keep) == 0 && inResult:
			return nil
		case len(keep) == 0:
			o.str(key, "")
			return nil
		}
	}
	o.key(key)
	*o.b = append(*o.b, '[')
	for i, p := range keep {
		if i > 0 {
			*o.b = append(*o.b, ',')
		}
		if err := writeAnthropicBlock(o.b, p, api); err != nil {
			return err
		}
	}
	*o.b = append(*o.b, ']')
	return nil
}

// writeAnthropicBlock writes one content block of a message that came from
// api. Unknown fields are written for the same API; of another API's, only
// cache_control (OpenAI-compatible gateways take it on parts too).
func writeAnthropicBlock(b *[]byte, p Part, api string) error {
	same := api == apiAnthropic || api == ""
	if p.Type == Opaque {
		*b = append(*b, p.Raw...)
		return nil
	}
	o := openObject(b)
	switch p.Type {
	case Text:
		o.str("type", "text")
		o.str("text", p.Text)
	case Image:
		o.str("type", "image")
		o.key("source")
		if same && len(p.Raw) > 0 {
			*b = append(*b, p.Raw...)
		} else {
			writeSourceFromURL(b, p.ImageURL)
		}
	case ToolCall:
		if p.ToolCallID == "" || p.ToolName == "" {
			return fmt.Errorf("%w: tool call without id or name", ErrEncode)
		}
		o.str("type", "tool_use")
		o.str("id", p.ToolCallID)
		o.str("name", p.ToolName)
		args := []byte(p.Arguments)
		switch {
		case api == apiAnthropic && len(args) == 0:
		case same && validJSON(args), !same && isJSONObject(args):
			o.raw("input", args)
		case len(args) == 0:
			o.raw("input", []byte("{}"))
		default:
			// Anthropic takes an object only: arguments that are not one
			// travel as {"_raw": "..."} and EncodeOpenAI unwraps them.
			o.key("input")
			ro := openObject(b)
			ro.str("_raw", p.Arguments)
			ro.close()
		}
	case ToolResult:
		if p.ToolCallID == "" {
			return fmt.Errorf("%w: tool result without tool_use_id", ErrEncode)
		}
		o.str("type", "tool_result")
		o.str("tool_use_id", p.ToolCallID)
		if err := writeAnthropicContent(o, "content", p.Wire, p.Content, api, true); err != nil {
			return err
		}
		if p.IsError {
			o.raw("is_error", []byte("true"))
		}
	case Reasoning:
		if p.Wire.Type == "redacted_thinking" {
			o.str("type", "redacted_thinking")
			if len(p.Raw) > 0 {
				o.raw("data", p.Raw)
			}
			break
		}
		o.str("type", "thinking")
		o.str("thinking", p.Text)
		if p.Signature != "" {
			o.str("signature", p.Signature)
		}
	default:
		return fmt.Errorf("%w: unknown part type %q", ErrEncode, p.Type)
	}
	if same {
		o.extra(p.Wire.Extra)
	} else {
		o.extra(p.Wire.Extra, "cache_control")
	}
	o.close()
	return nil
}

func isJSONObject(b []byte) bool {
	s := scanner{data: b}
	return s.peek() == '{' && validJSON(b)
}

// writeSourceFromURL writes an Anthropic image source for an image URL: a
// base64 source for a data: URI, a url source otherwise.
func writeSourceFromURL(b *[]byte, url string) {
	o := openObject(b)
	if mediaType, data, ok := parseDataURI(url); ok {
		o.str("type", "base64")
		o.str("media_type", mediaType)
		o.str("data", data)
	} else {
		o.str("type", "url")
		o.str("url", url)
	}
	o.close()
}

// parseDataURI splits a base64 data: URI into its media type and data.
func parseDataURI(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found || !strings.HasSuffix(meta, ";base64") {
		return "", "", false
	}
	mediaType, _, _ = strings.Cut(meta, ";")
	return mediaType, data, true
}

// imageURLFromSource returns the URL (or data: URI) an Anthropic image
// source stands for, "" for sources that have none (a file id).
func imageURLFromSource(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	s := scanner{data: raw}
	src, err := decodeAnthropicSource(&s)
	if err != nil {
		return ""
	}
	switch src.typ {
	case "base64":
		return "data:" + src.mediaType + ";base64," + src.data
	case "url":
		return src.url
	}
	return ""
}

// unwrapRawArguments undoes the {"_raw": "..."} wrapping of arguments that
// were not a JSON object, for OpenAI, which takes arguments as a string;
// empty arguments become "{}".
func unwrapRawArguments(args string) string {
	if args == "" {
		return "{}"
	}
	if !strings.Contains(args, `"_raw"`) {
		return args
	}
	var v string
	n := 0
	s := scanner{data: []byte(args)}
	err := s.object(func(k []byte) error {
		n++
		if string(k) != "_raw" {
			return fieldErr("", "other key")
		}
		var err error
		v, err = s.str()
		return err
	})
	if err != nil || n != 1 || s.end() != nil {
		return args
	}
	return v
}
