package fakellm

import (
	"bytes"
	"encoding/json"
)

// object is a JSON object that keeps its keys in the order written, so the
// wire output reads like the real APIs' (id first, "type" first in events).
type object []field

// field is one key of an object.
type field struct {
	k string
	v any
}

// MarshalJSON writes the fields in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encode(&b, f.k); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := encode(&b, f.v); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal encodes v as the providers do: no HTML escaping of <, > and &.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func encode(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's trailing newline
	return nil
}
