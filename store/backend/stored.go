package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// The stored form of a message, the same in every backend, and the
// tool-call lookup over it that resolves a tool result's tool name (ToolOf)
// when Append records it.

// EncodeMessage returns a message's stored form: its JSON without HTML
// escaping and without a trailing newline. A message that does not encode
// is store.ErrInvalid.
func EncodeMessage(m *message.Message) (string, error) {
	b := encodeBuffers.Get().(*bytes.Buffer)
	defer func() {
		if b.Cap() <= maxPooledBuffer {
			encodeBuffers.Put(b)
		}
	}()
	b.Reset()
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", fmt.Errorf("%w: message does not encode: %v", store.ErrInvalid, err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// encodeBuffers are EncodeMessage's buffers: encoded into a strings.Builder,
// a message's JSON was copied at each doubling of the builder, about twice
// its bytes allocated again on every append.
var encodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBuffer bounds the buffers kept: one large message's does not
// stay for the small ones.
const maxPooledBuffer = 64 << 10

// DecodeMessage decodes a message's stored form. It decodes as
// encoding/json does, with go-json-experiment's v1 semantics on the v2
// engine: several times faster, and a log replay is mostly this decoding.
func DecodeMessage(stored string) (*message.Message, error) {
	var m message.Message
	if err := jsonv1.Unmarshal([]byte(stored), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// CallName returns the tool name of the call callID that m makes, "" when
// m makes no such call: what a backend's ToolOf lookup asks of each
// candidate message.
func CallName(m message.Message, callID string) string {
	for _, p := range m.ToolCalls() {
		if p.ToolCallID == callID {
			return p.ToolName
		}
	}
	return ""
}

// CallNeedle returns text that the stored form (EncodeMessage) of a
// message making the call callID contains, so a backend can pre-filter
// candidate rows before decoding them.
func CallNeedle(callID string) string {
	// Encoded as EncodeMessage stores it: without HTML escaping.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(callID)
	return `"tool_call_id":` + strings.TrimSuffix(b.String(), "\n")
}

// CallNameInRows returns the tool name of the call callID in the first of
// rows that makes it. Each row has one column, a message's stored JSON;
// rows that do not scan or decode are skipped, as the lookup is best
// effort. It serves both database/sql and pgx rows; the caller closes them.
func CallNameInRows(rows interface {
	Next() bool
	Scan(dest ...any) error
}, callID string) string {
	for rows.Next() {
		var raw string
		var m message.Message
		if rows.Scan(&raw) == nil && json.Unmarshal([]byte(raw), &m) == nil {
			if n := CallName(m, callID); n != "" {
				return n
			}
		}
	}
	return ""
}

// Nanos and FromNanos are how the SQL backends store times: UTC Unix
// nanoseconds in an integer column, exact (PostgreSQL's timestamptz keeps
// only microseconds) and sortable; 0 stands for the zero time.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNanos is the inverse of Nanos.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// ThreadCols are the columns of the SQL backends' threads table that
// ScanThread reads, in its order.
const ThreadCols = `id, last_seq, messages, tokens, created, updated`

// ScanThread reads one row of ThreadCols (database/sql and pgx rows alike).
func ScanThread(sc interface{ Scan(...any) error }) (store.ThreadInfo, error) {
	var (
		ti               store.ThreadInfo
		created, updated int64
	)
	err := sc.Scan(&ti.ID, &ti.Events, &ti.Messages, &ti.Tokens, &created, &updated)
	ti.Created, ti.Updated = FromNanos(created), FromNanos(updated)
	return ti, err
}

// ToolOf returns the tool name of a tool-result message: the name it
// carries, or else the name of the call it answers as lookup finds it
// (lookup may be nil). "" for other messages.
func ToolOf(m message.Message, lookup func(callID string) string) string {
	if n := m.ToolName(); n != "" {
		return n
	}
	if lookup == nil || !m.IsToolResult() {
		return ""
	}
	for _, p := range m.ToolResults() {
		if p.ToolCallID != "" {
			if n := lookup(p.ToolCallID); n != "" {
				return n
			}
		}
	}
	return ""
}

// NeedsToolLookup reports whether ToolOf would consult its lookup for m.
func NeedsToolLookup(m message.Message) bool {
	return m.ToolName() == "" && m.IsToolResult() && len(m.ToolResults()) > 0
}

// NormalizeMessage returns what DecodeMessage(EncodeMessage(m)) returns,
// without the JSON: a copy of m that shares its strings, with what the
// stored form does not keep dropped (empty maps, empty raw values, an empty
// part list under a part, a zero Wire), raw JSON values compacted, a nil
// raw value in a map as null, and Time as its text gives it back. A message
// EncodeMessage refuses (a raw value that is not JSON) is refused the same
// way. Appending a message and keeping it in memory "as a Load returns it"
// costs a copy instead of an encoding and a decoding
// (TestNormalizeMessage compares the two).
func NormalizeMessage(m *message.Message) (*message.Message, error) {
	if !validMessageText(m) {
		// The stored form replaces invalid UTF-8 (which CheckEvent lets
		// through in a part's type, say): take it the long way.
		s, err := EncodeMessage(m)
		if err != nil {
			return nil, err
		}
		return DecodeMessage(s)
	}
	out := *m
	var err error
	if out.Parts, err = normalizeParts(m.Parts, false); err != nil {
		return nil, err
	}
	if len(m.Meta) == 0 {
		out.Meta = nil
	} else {
		out.Meta = make(map[string]string, len(m.Meta))
		for k, v := range m.Meta {
			out.Meta[k] = v
		}
	}
	if out.Wire, err = normalizeWire(m.Wire); err != nil {
		return nil, err
	}
	if !m.Time.IsZero() {
		// The text keeps the instant and the offset, not the location
		// value nor the monotonic reading.
		b, err := m.Time.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%w: message does not encode: %v", store.ErrInvalid, err)
		}
		var t time.Time
		if err := t.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("%w: message does not encode: %v", store.ErrInvalid, err)
		}
		out.Time = t
	}
	return &out, nil
}

// normalizeParts copies ps; omitted (a part's Content, omitempty) drops an
// empty list, which the stored form leaves out.
func normalizeParts(ps []message.Part, omitted bool) ([]message.Part, error) {
	if ps == nil || omitted && len(ps) == 0 {
		return nil, nil
	}
	out := make([]message.Part, len(ps))
	for i := range ps {
		p := ps[i]
		var err error
		if p.Content, err = normalizeParts(p.Content, true); err != nil {
			return nil, err
		}
		if p.Raw, err = normalizeRaw(p.Raw, true); err != nil {
			return nil, err
		}
		if p.Wire, err = normalizeWire(p.Wire); err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

func normalizeWire(w message.Wire) (message.Wire, error) {
	if w.IsZero() {
		return message.Wire{}, nil
	}
	var err error
	if w.Extra, err = normalizeRawMap(w.Extra); err != nil {
		return w, err
	}
	w.Item, err = normalizeRawMap(w.Item)
	return w, err
}

func normalizeRawMap(m map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		n, err := normalizeRaw(v, false)
		if err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, nil
}

// normalizeRaw is a raw value as the stored form gives it back: compacted,
// null for nil (in a map), nil when empty and omitted (a part's Raw); an
// empty value that is not omitted is not JSON, as for EncodeMessage.
func normalizeRaw(v json.RawMessage, omitted bool) (json.RawMessage, error) {
	switch {
	case len(v) == 0 && omitted:
		return nil, nil
	case v == nil:
		return json.RawMessage("null"), nil
	}
	var b bytes.Buffer
	b.Grow(len(v))
	if err := json.Compact(&b, v); err != nil {
		return nil, fmt.Errorf("%w: message does not encode: %v", store.ErrInvalid, err)
	}
	return b.Bytes(), nil
}

// validMessageText reports whether every string of m is valid UTF-8.
func validMessageText(m *message.Message) bool {
	if !utf8.ValidString(string(m.Role)) || !utf8.ValidString(m.Name) || !validWireText(&m.Wire) {
		return false
	}
	for k, v := range m.Meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return validPartsText(m.Parts)
}

func validPartsText(ps []message.Part) bool {
	for i := range ps {
		p := &ps[i]
		for _, s := range [...]string{string(p.Type), p.Text, p.ImageURL, p.Detail, p.ToolCallID, p.ToolName, p.Arguments, p.Signature} {
			if !utf8.ValidString(s) {
				return false
			}
		}
		if !validWireText(&p.Wire) || !validPartsText(p.Content) {
			return false
		}
	}
	return true
}

func validWireText(w *message.Wire) bool {
	for _, s := range [...]string{w.API, w.Form, w.Role, w.Type} {
		if !utf8.ValidString(s) {
			return false
		}
	}
	for k := range w.Extra {
		if !utf8.ValidString(k) {
			return false
		}
	}
	for k := range w.Item {
		if !utf8.ValidString(k) {
			return false
		}
	}
	return true
}
