package proxy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"object", `{"model":"x","messages":[{"role":"user","content":"hi"}],"n":1}`, true},
		{"spaces and escapes", " {\n \"mo\\u0064el\" : \"x\" , \"a\":[1,{\"b\":\"}\"}] } \n", true},
		{"empty", `{}`, true},
		{"array", `[1]`, false},
		{"truncated", `{"model":"x","messages":[`, false},
		{"missing comma", `{"a":1 "b":2}`, false},
		{"missing colon", `{"a" 1}`, false},
		{"bad value", `{"a":tru,"messages":[]}`, false},
		{"trailing garbage", `{"a":1}x`, false},
		{"unterminated string", `{"a":"x}`, false},
		{"not json", `hello`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBody([]byte(tc.body))
			var o *object
			if err == nil {
				o, err = parseChecked([]byte(tc.body))
			}
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err == nil && !json.Valid(o.bytes()) {
				t.Errorf("rewritten body is not valid JSON: %s", o.bytes())
			}
		})
	}
}

func TestObjectSetKeepsOrder(t *testing.T) {
	o, err := parseObject([]byte(`{"model":"m","messages":[1],"tools":[{"x":1}],"z":null}`))
	if err != nil {
		t.Fatal(err)
	}
	o.set("messages", []byte(`[2]`))
	o.set("tools", withRecallTools(o.get("tools"), OpenAI))
	o.del("z")
	o.set("new", []byte(`true`))
	got := string(o.bytes())
	if !strings.HasPrefix(got, `{"model":"m","messages":[2],"tools":[{"x":1},{"type":"function","function":{"name":"mneme_search"`) || !strings.HasSuffix(got, `,"new":true}`) {
		t.Errorf("got %s", got)
	}
	if !json.Valid([]byte(got)) {
		t.Errorf("invalid %s", got)
	}
}

// TestObjectBytesWith: writing a field's value in place gives what set
// then bytes give, wherever the field is, and when it is absent.
func TestObjectBytesWith(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[1],"tools":[{"x":1}],"z":null}`,
		`{"messages":[1]}`,
		`{"model":"m","stream":true,"messages" : [ 1 ]}`,
		`{"model":"m"}`,
		`{}`,
	} {
		o, err := parseObject([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := o.bytesWith("messages", 3, func(b []byte) ([]byte, error) { return append(b, `[2,3]`...), nil })
		if err != nil {
			t.Fatal(err)
		}
		o.set("messages", []byte(`[2,3]`))
		if want := o.bytes(); string(got) != string(want) {
			t.Errorf("%s: got %s, want %s", body, got, want)
		}
	}
}

func msgs(spec ...string) []message.Message {
	var out []message.Message
	for i := 0; i+1 < len(spec); i += 2 {
		role := message.Role(spec[i])
		switch {
		case strings.HasPrefix(spec[i+1], "call:"):
			out = append(out, message.NewToolCalls("", message.Part{ToolCallID: "c", ToolName: spec[i+1][5:], Arguments: `{"a": 1}`}))
		case role == message.Tool:
			out = append(out, message.NewToolResult("c", spec[i+1]))
		default:
			out = append(out, message.NewText(role, spec[i+1]))
		}
	}
	return out
}

func TestDeriveThreadID(t *testing.T) {
	a := DeriveThreadID("t", msgs("system", "S", "user", "goal", "assistant", "x"))
	if b := DeriveThreadID("t", msgs("system", "S", "user", "goal", "assistant", "y", "user", "more")); a != b {
		t.Error("the id depends on more than the first system and user message")
	}
	if b := DeriveThreadID("t", msgs("system", "S at 12:01, step 7", "user", "goal")); a != b {
		t.Error("the id depends on the system prompt")
	}
	for _, other := range []string{
		DeriveThreadID("u", msgs("system", "S", "user", "goal")),
		DeriveThreadID("t", msgs("system", "S", "user", "goal2")),
	} {
		if other == a {
			t.Error("two different runs share an id")
		}
	}
}

// FuzzCheckBody: what checkBody accepts is valid JSON for encoding/json
// too, and a body it accepts has no object with a member name twice.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `{"mess\x61ges":[]}`, `{"a":"\u0061","\u0061":1}`, `[{"x":1},{"x":1}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkBody(b) != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		d := json.NewDecoder(strings.NewReader(string(b)))
		var walk func() bool
		walk = func() bool {
			tok, err := d.Token()
			if err != nil {
				return false
			}
			switch tok {
			case json.Delim('{'):
				seen := map[string]bool{}
				for d.More() {
					k, _ := d.Token()
					if seen[k.(string)] {
						t.Fatalf("accepted a duplicate name %q in %q", k, b)
					}
					seen[k.(string)] = true
					walk()
				}
				d.Token()
			case json.Delim('['):
				for d.More() {
					walk()
				}
				d.Token()
			}
			return true
		}
		walk()
	})
}

// TestSkipString: the end of a string is the first quote after an even run
// of backslashes, whatever the run's length.
func TestSkipString(t *testing.T) {
	for _, tc := range []struct {
		s   string
		end int
	}{
		{`"" x`, 2},
		{`"ab" x`, 4},
		{`"a\"b" x`, 6},
		{`"a\\" x`, 5},
		{`"a\\\"" x`, 7},
		{`"\\\\" x`, 6},
		{`"\"\"" x`, 6},
		{`"«é»\u0022" x`, 14},
		{`"open`, 5},
		{`"open\"`, 7},
	} {
		if got := skipString([]byte(tc.s), 0); got != tc.end {
			t.Errorf("skipString(%s) = %d, want %d", tc.s, got, tc.end)
		}
	}
}

// FuzzParseChecked: a body checkBody accepts is split by parseChecked,
// which validates nothing again, into exactly the fields encoding/json
// reads, each with the value it reads; a body that is not an object is
// refused.
func FuzzParseChecked(f *testing.F) {
	for _, s := range []string{`{"a":"x\\","b":"\\\"}"}`, `{"a":["\"]",{"b":"\\\\"}],"c":1}`, `{"m\u0061":"\u0022"}`, `{}`, `[1]`, `"x"`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkBody(b) != nil {
			return
		}
		o, err := parseChecked(b)
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("checkBody accepted %q, encoding/json says %v", b, err)
		}
		m, isObject := v.(map[string]any)
		if isObject != (err == nil) {
			t.Fatalf("parseChecked(%q): %v (an object: %v)", b, err, isObject)
		}
		if err != nil {
			return
		}
		if len(o.fields) != len(m) {
			t.Fatalf("%q: %d fields, encoding/json reads %d", b, len(o.fields), len(m))
		}
		for _, fl := range o.fields {
			var fv any
			if err := json.Unmarshal(fl.val, &fv); err != nil {
				t.Fatalf("%q: field %q: value %q: %v", b, fl.key, fl.val, err)
			}
			want, ok := m[fl.key]
			if !ok || !reflect.DeepEqual(fv, want) {
				t.Fatalf("%q: field %q reads %v, encoding/json %v", b, fl.key, fv, want)
			}
		}
	})
}

// FuzzCheckedBody: checkedSet.check, having passed the elements of one body,
// says of the next what checkBody says, the same error or none, and the
// fields check returns are parseChecked's. The bodies
// are built around the fuzzed pieces so that they share elements: the
// previous request's a and b, and the next one's a, b and c, with the
// fuzzed glue between a and b (a comma in a well-formed body).
func FuzzCheckedBody(f *testing.F) {
	a := `{"role":"user","content":"Fix the bug in \"main.go\"."}`
	b := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"grep","arguments":"{\"q\":\"}\"}"}}]}`
	c := `{"role":"tool","tool_call_id":"c1","content":"main.go:3: }\\"{"}`
	for _, s := range [][4]string{
		{a, b, c, ","},
		{a, b, c, " , "},
		{a, b, `{"role":"user","role":"user"}`, ","},
		{a, b, `{"role":"user","content":"x"`, ","},
		{a, b, c, ""},
		{a, b, c, "],["},
		{a, b, c, `,"x":`},
		{a, b, c, `,{"a":1,"a":2},`},
		{a, b, `"\ud800"`, ","},
		{`{"a":[[[[1]]]]}`, b, c, ","},
		{a, `{"messages":1}`, c, `],"messages":[`},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, a, b, c, glue string) {
		cache := message.NewCache(0)
		set := newCheckedSet(cache.Hash)
		for _, body := range []string{
			`{"model":"m","messages":[` + a + `,` + b + `]}`,
			`{"model":"m","messages":[` + a + glue + b + `,` + c + `],"stream":false}`,
			`{"messages":[` + c + `,` + a + `,` + b + `]` + glue + `}`,
			`{"messages":[` + a + `],"messages":[` + b + glue + `]}`,
			`[` + a + `,` + b + `]`,
			glue + `{"messages":[` + a + `,` + b + `]}`,
		} {
			want := checkBody([]byte(body))
			o, got := set.check("t", []byte(body))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("body %q: check says %v, checkBody %v", body, got, want)
			}
			if o != nil {
				if p, err := parseChecked([]byte(body)); err != nil || !reflect.DeepEqual(o.fields, p.fields) {
					t.Fatalf("body %q: check's fields %+v, parseChecked's %+v (%v)", body, o, p, err)
				}
				// The messages decoded with the elements the check found
				// (and hashed) are those decoded without.
				if raw := o.get("messages"); raw != nil {
					want, werr := message.DecodeOpenAIMessages(raw)
					got, err := cache.For("t").DecodeOpenAIElems(raw, o.elems)
					if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
						t.Fatalf("body %q: decoded with the check's elements %+v, %v; without %+v, %v", body, got, err, want, werr)
					}
				}
			}
		}
	})
}

// TestCheckedSetScoped: the elements a tenant's body passed are known to
// that tenant only.
func TestCheckedSetScoped(t *testing.T) {
	set := newCheckedSet(nil)
	elem := `{"role":"user","content":"hi"}`
	if _, err := set.check("a", []byte(`{"messages":[`+elem+`]}`)); err != nil {
		t.Fatal(err)
	}
	e := message.Elem{Raw: []byte(elem), Hash: set.hash([]byte(elem))}
	if !set.has("a", e) || set.has("b", e) {
		t.Fatalf("known to a: %v, to b: %v; want true, false", set.has("a", e), set.has("b", e))
	}
}
