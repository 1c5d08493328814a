package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/mnemehq/mneme/message"
)

// Request checks the codecs leave to the proxy. A request that fails one
// is answered 400 before anything reaches the log, so that a rejected
// request leaves the store as it was; the rules are those the upstream APIs
// apply, so nothing valid upstream is refused here.

// Bounds of a request the proxy accepts.
const (
	// MaxNesting bounds how deeply a request body's arrays and objects
	// nest (encoding/json stops at 10,000; no real request comes close).
	MaxNesting = 512
	// MaxModelBytes bounds the model name.
	MaxModelBytes = 256
)

var (
	errInvalidUTF8 = errors.New("the request body is not valid UTF-8")
	errTooDeep     = fmt.Errorf("the request body nests deeper than %d levels", MaxNesting)
	errNoMessage   = errors.New("messages: at least one message is required")
)

// checkBody checks the body's bytes: valid UTF-8 (JSON text must be; a
// decoder would silently replace what is not, and the log would keep
// something the client never sent), a sane nesting depth, and JSON text as
// RFC 8259 spells it with no member name twice in one object, at any depth
// (RFC 7493). Parsers disagree on duplicates (the proxy would read the
// first "messages", the upstream the last) and on escapes JSON does not
// have ("mess\x61ges"): what the upstream reads must be what was logged.
//
// A body that passes is read by parseChecked without a second validation:
// the strict parse checks UTF-8 too, so a body is scanned here twice (its
// depth, then its JSON), and UTF-8 is looked at apart only to name the
// error of a body that failed.
func checkBody(body []byte) error {
	err := errTooDeep
	if nestingDepth(body) <= MaxNesting {
		err = checkJSON(body)
	}
	if err != nil && !utf8.Valid(body) {
		return errInvalidUTF8
	}
	return err
}

// checkJSON checks that body is one strict JSON value (duplicate names
// refused) and nothing after it.
func checkJSON(body []byte) error {
	if jsontext.Value(body).IsValid() {
		return nil // read in place; the streaming decoder below copies
	}
	d := jsontext.NewDecoder(bytes.NewReader(body))
	if _, err := d.ReadValue(); err != nil {
		return fmt.Errorf("the request body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "jsontext: "))
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return errors.New("the request body is not valid JSON: data after the top-level value")
	}
	return nil
}

// nestingDepth returns how deeply body's arrays and objects nest, strings
// skipped (an unbalanced body is the parser's business).
func nestingDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = skipString(b, i) - 1
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// checkFields checks the types of the fields the proxy reads besides the
// conversation: what it would otherwise misread as absent.
func checkFields(req *object) error {
	if v := req.get("model"); v != nil {
		if len(v) == 0 || v[0] != '"' {
			return errors.New("model: want a string")
		}
		if len(req.str("model")) > MaxModelBytes {
			return fmt.Errorf("model: longer than %d bytes", MaxModelBytes)
		}
	}
	if v := req.get("stream"); v != nil && string(v) != "true" && string(v) != "false" && string(v) != "null" {
		return errors.New("stream: want a boolean")
	}
	if v := req.get("tools"); v != nil && string(v) != "null" && (len(v) == 0 || v[0] != '[') {
		return errors.New("tools: want an array")
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v := req.get(k); v != nil && string(v) != "null" && !isInteger(v) {
			return fmt.Errorf("%s: want an integer", k)
		}
	}
	return nil
}

func isInteger(v []byte) bool {
	if len(v) > 0 && v[0] == '-' {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkConversation checks the tool pairing rules both APIs enforce: every
// tool call has an id, no id is used twice, every result answers a call of
// the step just before it, once. A call is closed by the next message that
// is not only tool results (the window gives it a synthetic result there),
// so a result after that is late. In resend mode the request holds the
// whole history, so every result must answer a call in it; in append mode
// the call may be in the log already, and the engine checks it there.
func checkConversation(msgs []message.Message, mode string, api API) error {
	conversation := 0
	for i := range msgs {
		if msgs[i].Role != message.System {
			conversation++
		}
	}
	if len(msgs) == 0 || api == Anthropic && conversation == 0 {
		return errNoMessage
	}
	seen := map[string]bool{} // every call id, and whether it was answered
	open := map[string]bool{} // calls a result may answer now
	closed := false           // a step closed since the request began (append mode)
	for i := range msgs {
		m := &msgs[i]
		for _, p := range m.Parts {
			if p.Type != message.ToolResult {
				continue
			}
			if p.ToolCallID == "" {
				return fmt.Errorf("messages[%d]: a tool result without a call id", i)
			}
			answered, known := seen[p.ToolCallID]
			switch {
			case answered:
				return fmt.Errorf("messages[%d]: tool call %q is answered twice", i, p.ToolCallID)
			case known && !open[p.ToolCallID]:
				return fmt.Errorf("messages[%d]: tool result for %q comes after a later message closed that call", i, p.ToolCallID)
			case !known && (mode == ModeResend || closed):
				return fmt.Errorf("messages[%d]: tool result for %q, which no earlier message calls", i, p.ToolCallID)
			}
			seen[p.ToolCallID] = true
			delete(open, p.ToolCallID)
		}
		if !m.IsToolResult() {
			clear(open)
			closed = true
		}
		for _, p := range m.Parts {
			if p.Type != message.ToolCall {
				continue
			}
			if p.ToolCallID == "" {
				return fmt.Errorf("messages[%d]: a tool call without an id", i)
			}
			if _, dup := seen[p.ToolCallID]; dup {
				return fmt.Errorf("messages[%d]: tool call id %q is used twice", i, p.ToolCallID)
			}
			seen[p.ToolCallID] = false
			open[p.ToolCallID] = true
		}
	}
	return nil
}
