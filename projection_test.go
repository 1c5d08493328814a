package mneme

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
)

func spec(s ...string) []message.Message {
	var out []message.Message
	for i := 0; i+1 < len(s); i += 2 {
		role := message.Role(s[i])
		switch {
		case strings.HasPrefix(s[i+1], "call:"):
			out = append(out, message.NewToolCalls("", message.Part{ToolCallID: "c", ToolName: s[i+1][5:], Arguments: `{"a": 1, "b": [1, 2]}`}))
		case role == message.Tool:
			out = append(out, message.NewToolResult("c", s[i+1]))
		default:
			out = append(out, message.NewText(role, s[i+1]))
		}
	}
	return out
}

// TestProjectionComparesMeaning: the dedup compares what the model would
// see, not how the client's SDK spelled it, and reads the recall rounds
// the client never saw out of the log.
func TestProjectionComparesMeaning(t *testing.T) {
	split := message.Message{Role: message.Assistant, Parts: []message.Part{{Type: message.Text, Text: "Hel"}, {Type: message.Text, Text: "lo"}}}
	hidden := message.NewToolResult("r", "search results")
	hidden.Meta = map[string]string{MetaRecall: "true"}
	reordered := message.NewToolCalls("", message.Part{ToolCallID: "c", ToolName: "read_file", Arguments: "{\n  \"b\": [1,2],\n  \"a\": 1\n}"})
	withExtra := message.NewText(message.Assistant, "Hello")
	withExtra.Wire.Extra = map[string]json.RawMessage{"refusal": json.RawMessage("null"), "annotations": json.RawMessage("[]")}
	nullText := message.NewToolCalls("", message.Part{ToolCallID: "c", ToolName: "read_file", Arguments: `{"a":1,"b":[1,2]}`})
	nullText.Parts = append([]message.Part{{Type: message.Text}}, nullText.Parts...)
	tests := []struct {
		name      string
		log, sent []message.Message
		same      bool
	}{
		{"identical", spec("user", "hi", "assistant", "Hello"), spec("user", "hi", "assistant", "Hello"), true},
		{"text split in parts", append(spec("user", "hi"), split), spec("user", "hi", "assistant", "Hello"), true},
		{"assistant run read as one", append(spec("user", "hi", "assistant", "Hel"), append([]message.Message{hidden}, spec("assistant", "lo")...)...), spec("user", "hi", "assistant", "Hello"), true},
		{"recall call hidden", append(spec("user", "hi", "assistant", "call:mneme_search"), hidden), spec("user", "hi"), true},
		{"argument order and spacing", append(spec("user", "hi"), reordered), spec("user", "hi", "assistant", "call:read_file"), true},
		{"refusal and annotations", append(spec("user", "hi"), withExtra), spec("user", "hi", "assistant", "Hello"), true},
		{"empty text beside a call", append(spec("user", "hi"), nullText), spec("user", "hi", "assistant", "call:read_file"), true},
		{"system prompt is not compared", spec("system", "at 12:00", "user", "hi"), spec("system", "at 12:01", "user", "hi"), true},
		{"edited text", spec("user", "hi"), spec("user", "hey"), false},
		{"mid-conversation system", spec("user", "hi", "system", "x"), spec("user", "hi", "user", "x"), false},
		{"different tool", spec("user", "hi", "assistant", "call:grep"), spec("user", "hi", "assistant", "call:read_file"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newLogProjector()
			for i := range tc.log {
				b.add(&tc.log[i], int64(i+1))
			}
			sent := requestProjection(tc.sent)
			a, c := b.result(), sent.units
			same := len(a) == len(c)
			for i := 0; same && i < len(a); i++ {
				same = a[i].h == c[i].h
			}
			if same != tc.same {
				t.Errorf("same = %v, want %v (%d vs %d units)", same, tc.same, len(a), len(c))
			}
		})
	}
}

// TestRunExtends: a harness's tool call after a text reply, in the next
// message or in the same one, extends the log's open run.
func TestRunExtends(t *testing.T) {
	have := newLogProjector()
	log := spec("user", "hi", "assistant", "Hello")
	for i := range log {
		have.add(&log[i], int64(i+1))
	}
	canon := have.openCanon()
	sep := spec("user", "hi", "assistant", "Hello", "assistant", "call:read_file")
	if mi, pi, ok := runExtends(canon, 'A', sep, 1, 2); !ok || mi != 2 || pi != 0 {
		t.Errorf("separate message: %d %d %v", mi, pi, ok)
	}
	one := spec("user", "hi", "assistant", "Hello")
	one[1].Parts = append(one[1].Parts, message.Part{Type: message.ToolCall, ToolCallID: "c", ToolName: "grep", Arguments: "{}"})
	if mi, pi, ok := runExtends(canon, 'A', one, 1, 1); !ok || mi != 1 || pi != 1 {
		t.Errorf("same message: %d %d %v", mi, pi, ok)
	}
	other := spec("user", "hi", "assistant", "Hello there")
	if _, _, ok := runExtends(canon, 'A', other, 1, 1); ok {
		t.Error("a longer text is not an extension at a part boundary")
	}
}

// canonJSON's fast path returns its input only where the slow path
// (decode, encode) returns it too.
func TestCanonJSONFastPath(t *testing.T) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":1}`, `{"arg":"x1"}`, `{"a":[1,2.5,-3e+2,true,false,null],"b":{"c":"d"}}`,
		`{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"a": 1}`, `{"a":"<b>"}`, `{"a":"\u0041"}`, `{"a":"é"}`,
		`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1}x`, `{"a":1} `, `[1,]`, `{"a":}`, `{"a"}`, `[tru]`,
		`{"":0,"a":0}`, `{"a":"x","aa":"y","b":[{"z":1,"y":2}]}`, `[1e5,1E-5,0.0,-0]`, `{"a":"\\"}`, `{"a":"tab	x"}`,
	} {
		fast := isCanonJSON(s)
		slow := string(canonJSONSlow([]byte(s)))
		if fast && slow != s {
			t.Errorf("%s: the fast path keeps it, the slow path gives %s", s, slow)
		}
		if got := string(canonJSON(s)); got != slow {
			t.Errorf("canonJSON(%s) = %s, want %s", s, got, slow)
		}
	}
}

func FuzzCanonJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"b":[1,{"c":null}],"a":"x"}`, `[1,2]`, `{"a":"<"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" {
			return
		}
		if got, want := string(canonJSON(s)), string(canonJSONSlow([]byte(s))); got != want {
			t.Fatalf("canonJSON(%q) = %q, the slow path %q", s, got, want)
		}
	})
}
