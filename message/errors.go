package message

import (
	"errors"
	"strconv"
	"strings"
)

// DecodeError reports a message that is not valid for its API: an unknown
// role, a missing tool_call_id, a tool call without id or name, content of
// the wrong JSON type, or malformed JSON. The proxy answers it with a 400.
type DecodeError struct {
	// Index is the position of the message in the list, or -1 when the
	// input was a single message or the request's system field.
	Index int
	// Field is the path of the offending field inside the message, such as
	// "tool_calls[0].id" or "content[2].text"; "" for the message itself.
	Field string
	// Msg says what is wrong: "missing", "want string", ...
	Msg string
	// List names the list Index counts in: "messages" when empty, "input"
	// for a Responses request.
	List string
}

// Error returns the path and the problem, e.g.
// "messages[3].tool_calls[0].id: missing".
func (e *DecodeError) Error() string {
	var b strings.Builder
	if e.Index >= 0 {
		list := e.List
		if list == "" {
			list = "messages"
		}
		b.WriteString(list)
		b.WriteByte('[')
		b.WriteString(strconv.Itoa(e.Index))
		b.WriteByte(']')
	}
	if e.Field != "" {
		if b.Len() > 0 && e.Field[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(e.Field)
	}
	if b.Len() == 0 {
		b.WriteString("message")
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// ErrEncode is wrapped by every error the encoders return: the Message
// cannot be expressed in the target API (an invalid role, a tool call
// without id or name, a tool result without the id of its call).
var ErrEncode = errors.New("message: cannot encode")

// fieldErr returns a DecodeError about field, to be placed in its message by
// the caller (see atIndex).
func fieldErr(field, msg string) *DecodeError {
	return &DecodeError{Index: -1, Field: field, Msg: msg}
}

// under prefixes the field path of a DecodeError with p ("content",
// "[3]"), so that errors found deep in a message name their full path.
func under(err error, p string) error {
	var de *DecodeError
	if !errors.As(err, &de) {
		return err
	}
	switch {
	case de.Field == "":
		de.Field = p
	case de.Field[0] == '[':
		de.Field = p + de.Field
	default:
		de.Field = p + "." + de.Field
	}
	return err
}

// atIndex turns any decoding error into a *DecodeError for message index
// (-1: not in a list).
func atIndex(err error, index int) error {
	var de *DecodeError
	if errors.As(err, &de) {
		de.Index = index
		return de
	}
	return &DecodeError{Index: index, Msg: err.Error()}
}

// isSyntax reports whether err is malformed JSON rather than a valid JSON
// value of the wrong shape.
func isSyntax(err error) bool {
	var se *syntaxError
	return errors.As(err, &se)
}
