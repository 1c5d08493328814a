package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"

	"github.com/mnemehq/mneme/message"
)

// object is a request body's top-level JSON object kept as raw field values
// in their original order, so that the proxy can replace the fields it owns
// (messages, system, tools) and give every other field back byte for byte.
type object struct {
	fields []objField
	// elems are the object elements of "messages" with their hashes, when
	// the body was checked by a checkedSet (message.Scoped.DecodeOpenAIElems
	// takes them instead of finding and hashing them again).
	elems []message.Elem
}

type objField struct {
	key    string
	rawKey []byte // the key as it was spelled, quotes included
	val    []byte
}

var errNotObject = errors.New("the request body must be a JSON object")

// parseObject splits a JSON object into its fields. It checks the object's
// own syntax (keys, colons, commas) but not the values': the proxy calls it
// on bodies checkBody has validated whole (parseChecked).
func parseObject(b []byte) (*object, error) {
	o, _, err := parseObjectSplit(b, "")
	return o, err
}

// parseObjectSplit is parseObject also returning where the elements of
// the array value of field split are in b, found on the way (nil when the
// field is absent, not an array or irregular). On a body that is not
// valid JSON its fields may differ from parseObject's: it is for bodies
// checked after (checkedSet.check).
func parseObjectSplit(b []byte, split string) (*object, [][2]int, error) {
	var elems [][2]int
	splitDone := split == ""
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, errNotObject
	}
	o := &object{fields: make([]objField, 0, 16)}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		if skipWS(b, i+1) != len(b) {
			return nil, nil, errNotObject
		}
		return o, elems, nil
	}
	for i < len(b) {
		if b[i] != '"' {
			return nil, nil, errNotObject
		}
		start, end := i, skipString(b, i)
		// JSON's escapes, not Go's: strconv would read "\x61" as "a".
		var key string
		if err := json.Unmarshal(b[i:end], &key); err != nil {
			return nil, nil, err
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, nil, errNotObject
		}
		i = skipWS(b, i+1)
		var vend int
		if !splitDone && key == split && i < len(b) && b[i] == '[' {
			vend, elems = splitElems(b, i)
		} else {
			vend = skipValue(b, i)
		}
		splitDone = splitDone || key == split
		if vend == i {
			return nil, nil, errNotObject
		}
		o.fields = append(o.fields, objField{key: key, rawKey: b[start:end], val: b[i:vend]})
		i = skipWS(b, vend)
		if i < len(b) && b[i] == '}' {
			if skipWS(b, i+1) != len(b) {
				return nil, nil, errNotObject // something after the object
			}
			return o, elems, nil
		}
		if i >= len(b) || b[i] != ',' {
			return nil, nil, errNotObject
		}
		i = skipWS(b, i+1)
	}
	return nil, nil, errNotObject
}

// get returns a field's raw value, nil when absent.
func (o *object) get(key string) []byte {
	for _, f := range o.fields {
		if f.key == key {
			return f.val
		}
	}
	return nil
}

// set replaces a field's value in place, or appends the field.
func (o *object) set(key string, val []byte) {
	for i := range o.fields {
		if o.fields[i].key == key {
			o.fields[i].val = val
			return
		}
	}
	q, _ := json.Marshal(key)
	o.fields = append(o.fields, objField{key: key, rawKey: q, val: val})
}

// del removes a field.
func (o *object) del(key string) {
	for i := range o.fields {
		if o.fields[i].key == key {
			o.fields = append(o.fields[:i], o.fields[i+1:]...)
			return
		}
	}
}

// str returns a string field's value ("" when absent or not a string).
func (o *object) str(key string) string {
	v := o.get(key)
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// boolean reports whether a field is the literal true.
func (o *object) boolean(key string) bool {
	return string(o.get(key)) == "true"
}

// bytes writes the object back.
func (o *object) bytes() []byte {
	n := 2
	for _, f := range o.fields {
		n += len(f.rawKey) + len(f.val) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, f := range o.fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, f.rawKey...)
		b = append(b, ':')
		b = append(b, f.val...)
	}
	return append(b, '}')
}

// bytesWith writes the object back with key's value written by val (as
// set would place it: in place, or last when absent); size is about how
// long that value will be.
func (o *object) bytesWith(key string, size int, val func([]byte) ([]byte, error)) ([]byte, error) {
	return o.bytesWithInto(nil, key, size, val)
}

// bytesWithInto is bytesWith appending to dst; on error dst's memory may
// have been written past len(dst).
func (o *object) bytesWithInto(dst []byte, key string, size int, val func([]byte) ([]byte, error)) ([]byte, error) {
	n := 2 + size
	found := false
	for _, f := range o.fields {
		n += len(f.rawKey) + 2
		if f.key != key {
			n += len(f.val)
		}
	}
	b := slices.Grow(dst, n)
	b = append(b, '{')
	var err error
	for i, f := range o.fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, f.rawKey...)
		b = append(b, ':')
		if f.key == key && !found {
			found = true
			if b, err = val(b); err != nil {
				return nil, err
			}
			continue
		}
		b = append(b, f.val...)
	}
	if !found {
		if len(o.fields) > 0 {
			b = append(b, ',')
		}
		q, _ := json.Marshal(key)
		b = append(append(b, q...), ':')
		if b, err = val(b); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// splitElems returns the end of the array at b[i] ('[') and where its
// elements are, walking it once; when the array is not a regular list
// of values separated by commas, the end is skipValue's and no elements.
func splitElems(b []byte, i int) (int, [][2]int) {
	elems := make([][2]int, 0, 64)
	j := skipWS(b, i+1)
	if j < len(b) && b[j] == ']' {
		return j + 1, nil
	}
	for j < len(b) {
		end := skipValue(b, j)
		if end == j {
			break
		}
		elems = append(elems, [2]int{j, end})
		j = skipWS(b, end)
		if j < len(b) && b[j] == ']' {
			return j + 1, elems
		}
		if j >= len(b) || b[j] != ',' {
			break
		}
		j = skipWS(b, j+1)
	}
	return skipValue(b, i), nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"').
// It jumps from quote to quote (IndexByte is vectorised; tool results are
// long strings) and counts the backslashes before each.
func skipString(b []byte, i int) int {
	for i++; i < len(b); {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		n := 0
		for n < i && b[i-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return i + 1
		}
		i++
	}
	return len(b)
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' && b[i] != '\t' && b[i] != '\r' {
		i++
	}
	return i
}
