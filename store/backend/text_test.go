package backend_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

func TestCheckJSONText(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{`{"a":"plain"}`, true},
		{`{"a":"\ud83d\ude00"}`, true},  // a surrogate pair: 😀
		{`{"a":"\\ud800"}`, true},       // an escaped backslash, then text
		{`{"a":"é ☃ 😀"}`, true},         // raw UTF-8
		{`{"a":"\ud800"}`, false},       // a lone high surrogate
		{`{"a":"\udc00"}`, false},       // a lone low surrogate
		{`{"a":"\ud800\u0041"}`, false}, // high surrogate, then no low one
		{`{"a":"\ud800x"}`, false},      // high surrogate at the end of an escape run
		{`{"a":"\u0000"}`, false},       // NUL as an escape
		{"{\"a\":\"\x00\"}", false},     // raw NUL
		{"{\"a\":\"\xff\"}", false},     // invalid UTF-8
		{`{"\ud800":1}`, false},         // in a key too
		{`"\ud83d\ude00\ud83d"`, false}, // a pair then a lone one
		{`{"a":"\u00e9"}`, true},        // an ordinary escape
		{`{"a":"\uZZZZ"}`, true},        // malformed: left to the decoder
	} {
		err := backend.CheckJSONText("body", []byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("%q: err %v, want ok=%v", c.in, err, c.ok)
		}
		if err != nil && !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%q: %v is not ErrInvalid", c.in, err)
		}
	}
}

func TestCheckScopeText(t *testing.T) {
	for _, id := range []string{"ok-id", "naïve"} {
		if err := backend.CheckScope("default", id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"bad\xff", "nul\x00id"} {
		if err := backend.CheckScope("default", id); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", id, err)
		}
		if err := backend.CheckScope(id, "t"); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("tenant %q: %v, want ErrInvalid", id, err)
		}
	}
}

// FuzzCheckJSONText: what passes the check and decodes holds only strings
// that are valid UTF-8 without NUL and without U+FFFD the input did not
// spell, so the decoder changed nothing.
func FuzzCheckJSONText(f *testing.F) {
	for _, s := range []string{`{"a":"\ud83d\ude00"}`, `"\ud800"`, `["\\u0000","\u0000"]`, "\"\xff\"", `{"k":"\ufffd"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if backend.CheckJSONText("body", b) != nil {
			return
		}
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		spelled := strings.Contains(string(b), "\ufffd") || strings.Contains(strings.ToLower(string(b)), `\ufffd`)
		var walk func(any)
		walk = func(v any) {
			switch x := v.(type) {
			case string:
				if !utf8.ValidString(x) || strings.ContainsRune(x, 0) || (!spelled && strings.ContainsRune(x, utf8.RuneError)) {
					t.Fatalf("%q passed the check but decodes to %q", b, x)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			case map[string]any:
				for k, e := range x {
					walk(k)
					walk(e)
				}
			}
		}
		walk(v)
	})
}
