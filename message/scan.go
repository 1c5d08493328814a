package message

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The codecs read JSON with this scanner rather than encoding/json: it walks
// the input once, validating as it goes, hands out exact sub-slices for the
// values kept raw (arguments, opaque parts, unknown fields) and decodes only
// the strings the Message models. encoding/json would rescan every nested
// level and compact the raw values it returns.

// syntaxError is malformed JSON.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return "invalid JSON at offset " + strconv.Itoa(e.off) + ": " + e.msg
}

// maxDepth bounds nesting, as encoding/json does, so that hostile input
// cannot exhaust the stack.
const maxDepth = 10000

type scanner struct {
	data  []byte
	pos   int
	depth int
}

func (s *scanner) fail(msg string) error { return &syntaxError{off: s.pos, msg: msg} }

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the first byte of the next value, or 0
// at the end of the input.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// end checks that only whitespace follows.
func (s *scanner) end() error {
	s.ws()
	if s.pos != len(s.data) {
		return s.fail("data after the value")
	}
	return nil
}

// skip consumes one value, validating it, and returns its bytes.
func (s *scanner) skip() ([]byte, error) {
	c := s.peek()
	start := s.pos
	var err error
	switch {
	case s.pos >= len(s.data):
		err = s.fail("unexpected end of input")
	case c == '{':
		err = s.object(func([]byte) error { _, err := s.skip(); return err })
	case c == '[':
		err = s.array(func(int) error { _, err := s.skip(); return err })
	case c == '"':
		_, _, err = s.scanString()
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		err = s.number()
	default:
		err = s.fail("invalid character " + strconv.QuoteRune(rune(c)))
	}
	if err != nil {
		return nil, err
	}
	return s.data[start:s.pos], nil
}

// try runs decode on the next value. If decode rejects the value's shape (a
// *DecodeError), the value is consumed anyway and the error handed back as
// shapeErr, so that the caller can decide later whether the field mattered
// (a "content" member only matters in a tool_result block, say). raw is the
// value's bytes either way.
func (s *scanner) try(decode func() error) (raw []byte, shapeErr, err error) {
	s.ws()
	start, depth := s.pos, s.depth
	if e := decode(); e != nil {
		if isSyntax(e) {
			return nil, nil, e
		}
		s.pos, s.depth = start, depth
		raw, err = s.skip()
		return raw, e, err
	}
	return s.data[start:s.pos], nil, nil
}

func (s *scanner) literal(lit string) error {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
		return s.fail("invalid literal")
	}
	s.pos += len(lit)
	return nil
}

func (s *scanner) number() error {
	d, i := s.data, s.pos
	digits := func() bool {
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i > j
	}
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		s.pos = i
		return s.fail("invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			s.pos = i
			return s.fail("invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			s.pos = i
			return s.fail("invalid number")
		}
	}
	s.pos = i
	return nil
}

// object consumes an object, calling member for each member with the
// scanner on its value; member must consume exactly that value. key is only
// valid during the call.
func (s *scanner) object(member func(key []byte) error) error {
	if s.peek() != '{' {
		return fieldErr("", "want object")
	}
	if s.depth++; s.depth > maxDepth {
		return s.fail("nested too deeply")
	}
	s.pos++
	if s.peek() == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.fail("want object key")
		}
		raw, complex, err := s.scanString()
		if err != nil {
			return err
		}
		key := raw[1 : len(raw)-1]
		if complex {
			key = []byte(unescape(key))
		}
		if s.peek() != ':' {
			return s.fail("want ':' after object key")
		}
		s.pos++
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail("want ',' or '}' in object")
		}
	}
}

// array consumes an array, calling elem for each element with the scanner
// on it; elem must consume exactly that element.
func (s *scanner) array(elem func(i int) error) error {
	if s.peek() != '[' {
		return fieldErr("", "want array")
	}
	if s.depth++; s.depth > maxDepth {
		return s.fail("nested too deeply")
	}
	s.pos++
	if s.peek() == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail("want ',' or ']' in array")
		}
	}
}

// str consumes a string value and returns it decoded; a value of another
// type is a *DecodeError ("want string").
func (s *scanner) str() (string, error) {
	if s.peek() != '"' {
		if s.pos >= len(s.data) {
			return "", s.fail("unexpected end of input")
		}
		return "", fieldErr("", "want string")
	}
	raw, complex, err := s.scanString()
	if err != nil {
		return "", err
	}
	if !complex {
		return string(raw[1 : len(raw)-1]), nil
	}
	return unescape(raw[1 : len(raw)-1]), nil
}

// scanString consumes a string and returns it with its quotes. complex
// reports escapes or non-ASCII bytes, which need unescape.
func (s *scanner) scanString() (raw []byte, complex bool, err error) {
	d := s.data
	start := s.pos
	i := start + 1
	for i < len(d) {
		for i < len(d) && plainByte[d[i]] {
			i++
		}
		if i >= len(d) {
			break
		}
		c := d[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return d[start : i+1], complex, nil
		case c == '\\':
			complex = true
			if i+1 >= len(d) {
				i = len(d)
				continue
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || getu4(d[i:]) < 0 {
					s.pos = i
					return nil, false, s.fail("invalid \\u escape")
				}
				i += 6
			default:
				s.pos = i
				return nil, false, s.fail("invalid escape in string")
			}
		case c < 0x20:
			s.pos = i
			return nil, false, s.fail("control character in string")
		default:
			if c >= utf8.RuneSelf {
				complex = true
			}
			i++
		}
	}
	s.pos = len(d)
	return nil, false, s.fail("unterminated string")
}

// plainByte marks the bytes a string holds as they are: not a quote, a
// backslash, a control character or part of a multi-byte rune.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// getu4 decodes \uXXXX at the start of b, or returns -1.
func getu4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// unescape decodes the inside of a validated JSON string exactly as
// encoding/json does (bad surrogates and invalid UTF-8 become U+FFFD), so
// that JSONEqual agrees with the codecs. Runs of plain bytes are copied
// whole: tool results are long and mostly plain.
func unescape(s []byte) string {
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\\' && s[i] < utf8.RuneSelf {
			i++
		}
		b.Write(s[:i])
		s = s[i:]
		if len(s) == 0 {
			break
		}
		if s[0] >= utf8.RuneSelf {
			j := 0
			for j < len(s) && s[j] >= utf8.RuneSelf {
				j++
			}
			if utf8.Valid(s[:j]) {
				b.Write(s[:j])
				s = s[j:]
				continue
			}
			r, size := utf8.DecodeRune(s)
			if r == utf8.RuneError && size == 1 {
				b.WriteRune(unicode.ReplacementChar)
			} else {
				b.Write(s[:size])
			}
			s = s[size:]
			continue
		}
		switch e := s[1]; e {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			rr := getu4(s)
			s = s[6:]
			if utf16.IsSurrogate(rr) {
				if dec := utf16.DecodeRune(rr, getu4(s)); dec != unicode.ReplacementChar {
					s = s[6:]
					b.WriteRune(dec)
					continue
				}
				rr = unicode.ReplacementChar
			}
			b.WriteRune(rr)
			continue
		default: // '"', '\\', '/'
			b.WriteByte(e)
		}
		s = s[2:]
	}
	return b.String()
}

// validJSON reports whether b is exactly one JSON value.
func validJSON(b []byte) bool {
	s := scanner{data: b}
	if _, err := s.skip(); err != nil {
		return false
	}
	return s.end() == nil
}

// member is one member of an object as sent: its key and its value's bytes.
type member struct {
	key string
	raw []byte
}

// dropKey removes the members named key: a later modeled value overrides
// an earlier stashed one.
func dropKey(ms []member, key string) []member {
	out := ms[:0]
	for _, m := range ms {
		if m.key != key {
			out = append(out, m)
		}
	}
	return out
}

// strField decodes a string value with s.try: ok is false (and raw still
// set) when the value is valid JSON of another type.
func (s *scanner) strField() (v string, raw []byte, ok bool, err error) {
	raw, shape, err := s.try(func() error {
		var e error
		v, e = s.str()
		return e
	})
	return v, raw, shape == nil, err
}

// keyName returns the key as a string, sharing the constant for the names
// the codecs model so that a request does not allocate one per member.
func keyName(k []byte) string {
	switch string(k) {
	case "type":
		return "type"
	case "text":
		return "text"
	case "role":
		return "role"
	case "content":
		return "content"
	case "id":
		return "id"
	case "name":
		return "name"
	case "function":
		return "function"
	case "arguments":
		return "arguments"
	case "input":
		return "input"
	case "tool_call_id":
		return "tool_call_id"
	case "tool_calls":
		return "tool_calls"
	case "tool_use_id":
		return "tool_use_id"
	case "image_url":
		return "image_url"
	case "url":
		return "url"
	case "detail":
		return "detail"
	case "source":
		return "source"
	case "cache_control":
		return "cache_control"
	case "is_error":
		return "is_error"
	case "thinking":
		return "thinking"
	case "signature":
		return "signature"
	case "data":
		return "data"
	}
	return string(k)
}

// extraOf copies the members whose key is not in known into a Wire.Extra
// map (nil when there are none). The last of duplicate keys wins, as in
// encoding/json.
func extraOf(ms []member, known ...string) map[string]json.RawMessage {
	var x map[string]json.RawMessage
next:
	for _, m := range ms {
		for _, k := range known {
			if m.key == k {
				continue next
			}
		}
		if x == nil {
			x = make(map[string]json.RawMessage)
		}
		x[m.key] = bytes.Clone(m.raw)
	}
	return x
}
