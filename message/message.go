package message

import (
	"encoding/json"
	"strings"
	"time"
)

// Role is who speaks a message.
type Role string

// The four roles. Anthropic has no system or tool role on messages: its system
// prompt is a request field and its tool results ride in user messages, so a
// decoded Anthropic tool result is a user message whose parts are tool results.
const (
	System    Role = "system"
	User      Role = "user"
	Assistant Role = "assistant"
	Tool      Role = "tool"
)

// Valid reports whether r is one of the four roles (OpenAI's "developer" is
// decoded as System with Wire.Role keeping the original spelling).
func (r Role) Valid() bool {
	switch r {
	case System, User, Assistant, Tool:
		return true
	}
	return false
}

// PartType says what a Part holds.
type PartType string

// The kinds of part.
const (
	Text       PartType = "text"
	Image      PartType = "image"       // ImageURL (a URL or a data: URI) or Source (Anthropic source object)
	ToolCall   PartType = "tool_call"   // ToolCallID, ToolName, Arguments
	ToolResult PartType = "tool_result" // ToolCallID, Content, IsError
	Reasoning  PartType = "reasoning"   // Text (the thinking), Signature; Redacted data in Raw
	Opaque     PartType = "opaque"      // Raw: a provider part kept byte-exact
)

// Part is one ordered piece of a message.
type Part struct {
	Type PartType `json:"type"`
	Text string   `json:"text,omitempty"`

	// Image.
	ImageURL string `json:"image_url,omitempty"`
	Detail   string `json:"detail,omitempty"`

	// Tool call and tool result.
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolName   string `json:"tool_name,omitempty"`
	// Arguments is the tool call's arguments as JSON text, exactly as the
	// client sent it (OpenAI sends a string, Anthropic an object).
	Arguments string `json:"arguments,omitempty"`
	Content   []Part `json:"content,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`

	// Reasoning.
	Signature string `json:"signature,omitempty"`

	// Raw keeps a provider part byte-exact: the whole part for Opaque, the
	// source object for an Anthropic image, the data of redacted thinking.
	Raw json.RawMessage `json:"raw,omitempty"`

	// Wire holds what re-encoding needs to give back exactly what was sent.
	Wire Wire `json:"wire,omitzero"`
}

// Message is one entry of a conversation, independent of the API that
// carried it. Codecs in this package turn it to and from OpenAI Chat
// Completions and Anthropic Messages without loss.
type Message struct {
	Role  Role              `json:"role"`
	Parts []Part            `json:"parts"`
	Name  string            `json:"name,omitempty"`
	Time  time.Time         `json:"time,omitzero"`
	Meta  map[string]string `json:"meta,omitempty"`
	Wire  Wire              `json:"wire,omitzero"`
}

// Wire records how a message or part looked on the wire so that encoding it
// back to the same API gives JSON-equal output. Nothing in Mneme reads it
// except the codecs.
type Wire struct {
	// API is "openai" or "anthropic": which codec decoded this.
	API string `json:"api,omitempty"`
	// Form is how the content was spelled: "string", "parts", "null" or ""
	// (absent).
	Form string `json:"form,omitempty"`
	// Role keeps a role spelling that maps onto another Role ("developer").
	Role string `json:"role,omitempty"`
	// Type keeps the original part type where several map onto one
	// PartType ("redacted_thinking", "input_text").
	Type string `json:"type,omitempty"`
	// Extra holds fields this package does not model (cache_control,
	// citations, refusal, audio, ...), re-emitted as they came.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
	// Item holds, on the part that starts a Responses input or output
	// item, the item's own members the codec does not model (id, status,
	// ...), where Extra holds the part's.
	Item map[string]json.RawMessage `json:"item,omitempty"`
}

// IsZero lets encoding/json omit an empty Wire. Its receiver is a pointer:
// encoding/json calls a value receiver's through an interface holding a
// copy of the Wire, an allocation for every part of every message encoded.
func (w *Wire) IsZero() bool {
	return w.API == "" && w.Form == "" && w.Role == "" && w.Type == "" && len(w.Extra) == 0 && len(w.Item) == 0
}

// TextOf returns the message's text parts joined by newlines.
func (m Message) TextOf() string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == Text {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// PlainText returns every human-readable text the message carries: text,
// reasoning, tool call names and arguments, tool result contents. It is what
// the archive indexes and what previews are cut from.
func (m Message) PlainText() string {
	var b strings.Builder
	writePlain(&b, m.Parts)
	return b.String()
}

func writePlain(b *strings.Builder, parts []Part) {
	for _, p := range parts {
		var s string
		switch p.Type {
		case Text, Reasoning:
			s = p.Text
		case ToolCall:
			s = p.ToolName + "(" + p.Arguments + ")"
		case ToolResult:
			writePlain(b, p.Content)
			continue
		case Image:
			s = "[image]"
		case Opaque:
			s = string(p.Raw)
		}
		if s == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
}

// ToolCalls returns the tool-call parts of the message.
func (m Message) ToolCalls() []Part { return m.partsOf(ToolCall) }

// ToolResults returns the tool-result parts of the message.
func (m Message) ToolResults() []Part { return m.partsOf(ToolResult) }

func (m Message) partsOf(t PartType) []Part {
	var out []Part
	for _, p := range m.Parts {
		if p.Type == t {
			out = append(out, p)
		}
	}
	return out
}

// IsToolResult reports whether the message carries only tool results: an
// OpenAI tool message, or an Anthropic user message of tool_result blocks.
// Such a message continues a turn; it never starts one.
func (m Message) IsToolResult() bool {
	if len(m.Parts) == 0 {
		return m.Role == Tool
	}
	for _, p := range m.Parts {
		if p.Type != ToolResult {
			return false
		}
	}
	return true
}

// StartsTurn reports whether the message opens a new turn: a user message
// that is not a tool result.
func (m Message) StartsTurn() bool {
	return m.Role == User && !m.IsToolResult()
}

// ToolName returns, for a tool-result message, the name of the tool if the
// codec knew it (OpenAI tool messages may carry a name); "" otherwise.
func (m Message) ToolName() string {
	for _, p := range m.Parts {
		if p.Type == ToolResult && p.ToolName != "" {
			return p.ToolName
		}
	}
	if m.Role == Tool {
		return m.Name
	}
	return ""
}

// NewText returns a message with a single text part.
func NewText(role Role, text string) Message {
	return Message{Role: role, Parts: []Part{{Type: Text, Text: text}}}
}

// NewToolResult returns an OpenAI-style tool message answering callID.
func NewToolResult(callID, text string) Message {
	return Message{Role: Tool, Parts: []Part{{
		Type: ToolResult, ToolCallID: callID,
		Content: []Part{{Type: Text, Text: text}},
	}}}
}

// NewToolCalls returns an assistant message that calls tools.
func NewToolCalls(text string, calls ...Part) Message {
	m := Message{Role: Assistant}
	if text != "" {
		m.Parts = append(m.Parts, Part{Type: Text, Text: text})
	}
	for _, c := range calls {
		c.Type = ToolCall
		m.Parts = append(m.Parts, c)
	}
	return m
}

// Clone returns a deep copy of m, so that a window can rewrite parts without
// touching the log's copy.
func (m Message) Clone() Message {
	c := m
	c.Parts = cloneParts(m.Parts)
	if m.Meta != nil {
		c.Meta = make(map[string]string, len(m.Meta))
		for k, v := range m.Meta {
			c.Meta[k] = v
		}
	}
	c.Wire = m.Wire.clone()
	return c
}

func cloneParts(ps []Part) []Part {
	if ps == nil {
		return nil
	}
	out := make([]Part, len(ps))
	for i, p := range ps {
		out[i] = p
		out[i].Content = cloneParts(p.Content)
		out[i].Wire = p.Wire.clone()
	}
	return out
}

func (w Wire) clone() Wire {
	c := w
	if w.Extra != nil {
		c.Extra = make(map[string]json.RawMessage, len(w.Extra))
		for k, v := range w.Extra {
			c.Extra[k] = v
		}
	}
	if w.Item != nil {
		c.Item = make(map[string]json.RawMessage, len(w.Item))
		for k, v := range w.Item {
			c.Item[k] = v
		}
	}
	return c
}
