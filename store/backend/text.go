package backend

import (
	"bytes"
	"fmt"
	"github.com/mnemehq/mneme/store"
	"strings"
	"unicode/utf8"

	"github.com/mnemehq/mneme/message"
)

// CheckText refuses a string that no backend can store as it is: invalid
// UTF-8 (PostgreSQL refuses it, SQLite would keep bytes that come back
// mangled) or a NUL byte (PostgreSQL text cannot hold one). Every backend
// applies it to ids and stored strings, so they accept and refuse the same
// input. what names the field in the error.
func CheckText(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", store.ErrInvalid, what)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s contains a NUL character", store.ErrInvalid, what)
	}
	return nil
}

// CheckJSONText refuses JSON text whose strings could not be stored as
// they are written: invalid UTF-8, a NUL (raw or as \u0000), or a \u escape
// of a lone UTF-16 surrogate (which encoding/json would silently turn into
// U+FFFD, so the stored text would differ from what was sent). It checks
// text only: whether b is valid JSON is the decoder's concern.
func CheckJSONText(what string, b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: %s is not valid UTF-8", store.ErrInvalid, what)
	}
	// Only a NUL byte or a \u escape can fail the scan below: text with
	// neither (nearly every body; both searches are vectorised) passes
	// without it.
	if bytes.IndexByte(b, 0) < 0 && !bytes.Contains(b, []byte(`\u`)) {
		return nil
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == 0:
			return fmt.Errorf("%w: %s contains a NUL character", store.ErrInvalid, what)
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(b):
			i++
			if b[i] != 'u' {
				continue
			}
			r, ok := hex4(b, i+1)
			if !ok {
				continue // malformed: the decoder says so
			}
			i += 4
			switch {
			case r == 0:
				return fmt.Errorf("%w: %s contains a NUL character (\\u0000)", store.ErrInvalid, what)
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("%w: %s contains a lone UTF-16 surrogate (\\u%04x)", store.ErrInvalid, what, r)
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := -1, false
				if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
					lo, ok = hex4(b, i+3)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return fmt.Errorf("%w: %s contains a lone UTF-16 surrogate (\\u%04x)", store.ErrInvalid, what, r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (int, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	r := 0
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// checkMessage applies CheckText to every string of a message and
// CheckJSONText to its raw JSON.
func checkMessage(m *message.Message) error {
	if err := CheckText("message name", m.Name); err != nil {
		return err
	}
	for k, v := range m.Meta {
		if err := CheckText("message meta", k+v); err != nil {
			return err
		}
	}
	if err := checkWire(m.Wire); err != nil {
		return err
	}
	return checkParts(m.Parts)
}

func checkParts(parts []message.Part) error {
	for i := range parts {
		p := &parts[i]
		for _, s := range [...]string{p.Text, p.ImageURL, p.Detail, p.ToolCallID, p.ToolName, p.Arguments, p.Signature} {
			if err := CheckText("message text", s); err != nil {
				return err
			}
		}
		if err := CheckJSONText("message part", p.Raw); err != nil {
			return err
		}
		if err := checkWire(p.Wire); err != nil {
			return err
		}
		if err := checkParts(p.Content); err != nil {
			return err
		}
	}
	return nil
}

func checkWire(w message.Wire) error {
	if err := CheckText("message wire", w.API+w.Form+w.Role+w.Type); err != nil {
		return err
	}
	for k, v := range w.Extra {
		if err := CheckText("message field name", k); err != nil {
			return err
		}
		if err := CheckJSONText("message field "+k, v); err != nil {
			return err
		}
	}
	return nil
}
