package backend

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

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
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", fmt.Errorf("%w: message does not encode: %v", store.ErrInvalid, err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

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
