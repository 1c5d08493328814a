package message

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// The encoders write JSON by hand for the same reasons the decoders scan
// it: raw values (arguments, opaque parts, unknown fields) go out byte for
// byte instead of being compacted, and the output is deterministic (unknown
// fields in sorted key order), so a window encodes to the same bytes on
// every call and provider prompt caches keep hitting.

const hexDigits = "0123456789abcdef"

// encodedSize estimates the bytes ms take encoded, so that an encoder
// allocates its output once instead of doubling it up from a small buffer
// (a window of tool results is tens to hundreds of KB): the text and raw
// bytes, room for the names, ids and punctuation, an eighth for escapes.
func encodedSize(ms []Message) int {
	n := 2
	for i := range ms {
		n += 64 + partsSize(ms[i].Parts)
	}
	return n + n/8
}

func partsSize(ps []Part) int {
	n := 0
	for i := range ps {
		p := &ps[i]
		n += 96 + len(p.Text) + len(p.Arguments) + len(p.Raw) + len(p.ImageURL) + len(p.ToolCallID) + len(p.ToolName) + len(p.Signature) + partsSize(p.Content)
	}
	return n
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// objw writes one JSON object into a shared buffer and remembers the keys it
// wrote, so that Wire.Extra never repeats a field the Message models: the
// modeled value wins.
type objw struct {
	b    *[]byte
	n    int
	kb   [8]string
	more []string
}

func openObject(b *[]byte) *objw {
	*b = append(*b, '{')
	return &objw{b: b}
}

func (o *objw) key(k string) {
	if o.n > 0 {
		*o.b = append(*o.b, ',')
	}
	if o.n < len(o.kb) {
		o.kb[o.n] = k
	} else {
		o.more = append(o.more, k)
	}
	o.n++
	*o.b = appendString(*o.b, k)
	*o.b = append(*o.b, ':')
}

// has reports whether k is among the first n keys written.
func (o *objw) has(n int, k string) bool {
	if slices.Contains(o.kb[:min(n, len(o.kb))], k) {
		return true
	}
	return n > len(o.kb) && slices.Contains(o.more[:n-len(o.kb)], k)
}

func (o *objw) str(k, v string) {
	o.key(k)
	*o.b = appendString(*o.b, v)
}

func (o *objw) raw(k string, v []byte) {
	o.key(k)
	*o.b = append(*o.b, v...)
}

// extra writes the fields of x not yet written, in key order. With allow
// set, only those keys are written (unknown fields of one API that the other
// also takes, such as cache_control).
func (o *objw) extra(x map[string]json.RawMessage, allow ...string) {
	if len(x) == 0 {
		return
	}
	modeled := o.n // map keys are unique: only the modeled ones can clash
	keys := make([]string, 0, len(x))
	for k := range x {
		if !o.has(modeled, k) && (allow == nil || slices.Contains(allow, k)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		o.raw(k, x[k])
	}
}

// members writes the members of the JSON object obj not yet written, in
// their order. It is how unknown fields of a nested object (an OpenAI
// tool call's "function", an image part's "image_url") come back: Wire.Extra
// keeps them under the nested object's key.
func (o *objw) members(obj []byte) {
	if len(obj) == 0 {
		return
	}
	var ms []member
	s := scanner{data: obj}
	err := s.object(func(k []byte) error {
		raw, err := s.skip()
		ms = append(ms, member{key: string(k), raw: raw})
		return err
	})
	if err != nil {
		return
	}
	modeled := o.n
	for _, m := range lastOfEach(ms) {
		if !o.has(modeled, m.key) {
			o.raw(m.key, m.raw)
		}
	}
}

// lastOfEach drops all but the last of members with the same key (the one
// encoding/json would read), keeping their order. Linear, so that a hostile
// object with many keys costs no more than its size.
func lastOfEach(ms []member) []member {
	last := make(map[string]int, len(ms))
	for i, m := range ms {
		last[m.key] = i
	}
	if len(last) == len(ms) {
		return ms
	}
	out := make([]member, 0, len(last))
	for i, m := range ms {
		if last[m.key] == i {
			out = append(out, m)
		}
	}
	return out
}

func (o *objw) close() { *o.b = append(*o.b, '}') }

// objectOf writes members as a JSON object, in their order (nil when there
// are none). Of duplicate keys only the last is kept, the one encoding/json
// would have read.
func objectOf(ms []member) json.RawMessage {
	if len(ms) == 0 {
		return nil
	}
	var b []byte
	o := openObject(&b)
	for _, m := range lastOfEach(ms) {
		o.key(m.key)
		b = append(b, m.raw...)
	}
	o.close()
	return b
}
