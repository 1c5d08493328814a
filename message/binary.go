package message

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// The binary form of a message: what a window snapshot keeps of its
// messages. A cold start decodes a window's worth of them, and most of
// their bytes are text: in JSON each string is scanned for escapes and
// copied out, about 100 MB/s; here a string is a length and its bytes,
// copied out at once (ReadBinary). It round-trips a Message
// exactly, nil and empty slices and maps apart, which JSON does not
// promise; it is not a wire or storage format anyone else reads, and
// its version is that of the snapshot that holds it.
//
// Layout: strings and byte slices are a uvarint length and the bytes;
// a slice or map that may be nil is a uvarint count plus one, 0 for nil;
// map entries are in key order (one message, one encoding); a time is
// its MarshalBinary form behind a uvarint length, 0 for the zero Time.
//
// binaryFields pins the fields the encoding knows: a field added to
// Message, Part or Wire fails TestBinaryKnowsEveryField until it is
// encoded here too.
var binaryFields = map[string]int{"Message": 6, "Part": 12, "Wire": 6}

// ErrBinary: the bytes are not a message's binary form.
var ErrBinary = errors.New("message: malformed binary form")

// AppendBinary appends m's binary form to b.
func AppendBinary(b []byte, m *Message) []byte {
	b = appendBinString(b, string(m.Role))
	b = appendParts(b, m.Parts)
	b = appendBinString(b, m.Name)
	if m.Time == (time.Time{}) {
		b = binary.AppendUvarint(b, 0)
	} else {
		t, err := m.Time.MarshalBinary()
		if err != nil { // a zone offset that is not whole minutes: keep the instant
			t, _ = m.Time.UTC().MarshalBinary()
		}
		b = appendBinString(b, string(t))
	}
	if m.Meta == nil {
		b = binary.AppendUvarint(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(m.Meta))+1)
		for _, k := range sortedKeys(m.Meta) {
			b = appendBinString(b, k)
			b = appendBinString(b, m.Meta[k])
		}
	}
	return appendWire(b, &m.Wire)
}

func appendParts(b []byte, ps []Part) []byte {
	if ps == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(ps))+1)
	for i := range ps {
		p := &ps[i]
		b = appendBinString(b, string(p.Type))
		b = appendBinString(b, p.Text)
		b = appendBinString(b, p.ImageURL)
		b = appendBinString(b, p.Detail)
		b = appendBinString(b, p.ToolCallID)
		b = appendBinString(b, p.ToolName)
		b = appendBinString(b, p.Arguments)
		b = appendParts(b, p.Content)
		b = appendBool(b, p.IsError)
		b = appendBinString(b, p.Signature)
		b = appendBytes(b, p.Raw)
		b = appendWire(b, &p.Wire)
	}
	return b
}

func appendWire(b []byte, w *Wire) []byte {
	b = appendBinString(b, w.API)
	b = appendBinString(b, w.Form)
	b = appendBinString(b, w.Role)
	b = appendBinString(b, w.Type)
	b = appendRawMap(b, w.Extra)
	return appendRawMap(b, w.Item)
}

func appendRawMap(b []byte, m map[string]json.RawMessage) []byte {
	if m == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(m))+1)
	for _, k := range sortedKeys(m) {
		b = appendBinString(b, k)
		b = appendBytes(b, m[k])
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func appendBinString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes keeps nil apart from empty.
func appendBytes(b []byte, p []byte) []byte {
	if p == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(p))+1)
	return append(b, p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// ReadBinary decodes the message at the start of b (AppendBinary's form)
// and returns it with the rest of b. The message shares no memory with b:
// substrings of one snapshot-sized string would keep all of it alive
// while any message of the window it restored does.
func ReadBinary(b []byte) (Message, []byte, error) {
	r := binReader{s: b}
	var m Message
	m.Role = Role(r.str())
	m.Parts = r.parts(0)
	m.Name = r.str()
	if t := r.raw(); len(t) > 0 {
		if err := m.Time.UnmarshalBinary(t); err != nil {
			return Message{}, nil, ErrBinary
		}
	}
	if n := r.count(2); n > 0 {
		m.Meta = make(map[string]string, n-1)
		for range n - 1 {
			k := r.str()
			m.Meta[k] = r.str()
		}
	}
	r.wire(&m.Wire)
	if r.bad {
		return Message{}, nil, ErrBinary
	}
	return m, r.s, nil
}

// maxBinDepth bounds the nesting of parts (a tool result's content) that
// ReadBinary follows: malformed input must not recurse without end.
const maxBinDepth = 32

// minPart is the fewest bytes a part's binary form takes: twelve strings,
// four counts and a bool, each a byte when empty.
const minPart = 17

// binReader reads the binary form from s, noting the first fault in bad
// (every read after it returns zero values).
type binReader struct {
	s   []byte
	bad bool
}

func (r *binReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	var v uint64
	for i := 0; i < len(r.s) && i < binary.MaxVarintLen64; i++ {
		c := r.s[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			r.s = r.s[i+1:]
			return v
		}
	}
	r.bad = true
	return 0
}

// count reads a count plus one, bounded by what s can still hold: each
// element takes at least size bytes, so that malformed input cannot make
// it allocate more than a few times its length.
func (r *binReader) count(size int) uint64 {
	n := r.uvarint()
	if n > uint64(len(r.s)/size)+1 {
		r.bad = true
		return 0
	}
	return n
}

// raw returns the next length-prefixed bytes, in place.
func (r *binReader) raw() []byte {
	n := r.uvarint()
	if n > uint64(len(r.s)) {
		r.bad = true
		return nil
	}
	v := r.s[:n:n]
	r.s = r.s[n:]
	return v
}

func (r *binReader) str() string { return string(r.raw()) }

func (r *binReader) bytes() []byte {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	if n-1 > uint64(len(r.s)) {
		r.bad = true
		return nil
	}
	v := append([]byte{}, r.s[:n-1]...)
	r.s = r.s[n-1:]
	return v
}

func (r *binReader) bool() bool {
	if r.bad || len(r.s) == 0 || r.s[0] > 1 {
		r.bad = true
		return false
	}
	v := r.s[0] == 1
	r.s = r.s[1:]
	return v
}

func (r *binReader) parts(depth int) []Part {
	n := r.count(minPart)
	if n == 0 {
		return nil
	}
	if depth >= maxBinDepth {
		r.bad = true
		return nil
	}
	ps := make([]Part, n-1)
	for i := range ps {
		p := &ps[i]
		p.Type = PartType(r.str())
		p.Text = r.str()
		p.ImageURL = r.str()
		p.Detail = r.str()
		p.ToolCallID = r.str()
		p.ToolName = r.str()
		p.Arguments = r.str()
		p.Content = r.parts(depth + 1)
		p.IsError = r.bool()
		p.Signature = r.str()
		p.Raw = r.bytes()
		r.wire(&p.Wire)
		if r.bad {
			return nil
		}
	}
	return ps
}

func (r *binReader) wire(w *Wire) {
	w.API = r.str()
	w.Form = r.str()
	w.Role = r.str()
	w.Type = r.str()
	w.Extra = r.rawMap()
	w.Item = r.rawMap()
}

func (r *binReader) rawMap() map[string]json.RawMessage {
	n := r.count(2)
	if n == 0 {
		return nil
	}
	m := make(map[string]json.RawMessage, n-1)
	for range n - 1 {
		k := r.str()
		m[k] = r.bytes()
	}
	return m
}
