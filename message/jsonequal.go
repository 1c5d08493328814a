package message

import (
	"bytes"
	"encoding/json"
	"io"
	"math/big"
	"strings"
)

// JSONEqual reports whether a and b hold the same JSON value: objects equal
// whatever their key order, numbers equal by value (1.0 == 1e0), strings
// equal after unescaping. Invalid JSON is equal to nothing. It is what the
// codecs' round-trip guarantee means by "the same".
func JSONEqual(a, b []byte) bool {
	va, ok := parseJSON(a)
	if !ok {
		return false
	}
	vb, ok := parseJSON(b)
	return ok && equalJSON(va, vb)
}

func parseJSON(data []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, false
	}
	return v, true
}

func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equalJSON(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		return normNumber(string(a)) == normNumber(string(b))
	case string:
		b, ok := b.(string)
		return ok && a == b
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case nil:
		return b == nil
	}
	return false
}

// normNumber writes a JSON number in one canonical form, sign, significant
// digits and exponent, so that numbers compare by exact value without
// expanding 1e999999999.
func normNumber(n string) string {
	neg := strings.HasPrefix(n, "-")
	n = strings.TrimPrefix(n, "-")
	mant, expText, _ := strings.Cut(strings.ToLower(n), "e")
	exp, ok := new(big.Int).SetString(strings.TrimPrefix(expText, "+"), 10)
	if !ok {
		exp = new(big.Int)
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp.Sub(exp, big.NewInt(int64(len(frac))))
	if digits == "" {
		return "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	exp.Add(exp, big.NewInt(int64(len(digits)-len(trimmed))))
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + exp.String()
}
