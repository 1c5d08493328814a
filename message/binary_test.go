package message

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestBinaryKnowsEveryField fails when a field is added to Message, Part or
// Wire: AppendBinary and ReadBinary must carry it before binaryFields is
// raised, or a snapshot would drop it without a word.
func TestBinaryKnowsEveryField(t *testing.T) {
	for _, v := range []any{Message{}, Part{}, Wire{}} {
		typ := reflect.TypeOf(v)
		if got, want := typ.NumField(), binaryFields[typ.Name()]; got != want {
			t.Errorf("%s has %d fields, the binary form knows %d: encode the new field in binary.go", typ.Name(), got, want)
		}
	}
}

// binaryCorpus is every message of the codecs' golden files, and messages
// that set every field, nil and empty apart.
func binaryCorpus(t testing.TB) []Message {
	var ms []Message
	files, _ := filepath.Glob(filepath.Join("testdata", "*", "*.decoded.json"))
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var got []Message
		if err := json.Unmarshal(data, &got); err != nil {
			// Some golden files hold one message.
			var one Message
			if err := json.Unmarshal(data, &one); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			got = []Message{one}
		}
		ms = append(ms, got...)
	}
	full := Message{
		Role: Assistant, Name: "n\x00é", Time: time.Date(2026, 12, 3, 9, 8, 7, 6, time.FixedZone("", 3600)),
		Meta: map[string]string{"b": "2", "a": "", "": "x"},
		Wire: Wire{API: "openai", Form: "parts", Role: "developer", Type: "input_text",
			Extra: map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`), "empty": {}, "nil": nil},
			Item:  map[string]json.RawMessage{"id": json.RawMessage(`"msg_1"`)}},
		Parts: []Part{
			{Type: Text, Text: "hello\n\"world\"", Wire: Wire{Extra: map[string]json.RawMessage{}}},
			{Type: Image, ImageURL: "data:image/png;base64,AAAA", Detail: "high", Raw: json.RawMessage(`{"type":"base64"}`)},
			{Type: ToolCall, ToolCallID: "c1", ToolName: "read", Arguments: `{"path":"a"}`},
			{Type: ToolResult, ToolCallID: "c1", IsError: true, Content: []Part{{Type: Text, Text: "inner", Content: []Part{}}}},
			{Type: Reasoning, Text: "think", Signature: "sig", Raw: json.RawMessage{}},
			{Type: Opaque, Raw: json.RawMessage(`{"type":"web_search_call"}`)},
		},
	}
	return append(ms, full, Message{}, Message{Parts: []Part{}, Meta: map[string]string{}}, Message{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
}

func TestBinaryRoundTrip(t *testing.T) {
	ms := binaryCorpus(t)
	var all []byte
	for _, m := range ms {
		all = AppendBinary(all, &m)
	}
	rest := all
	for i, want := range ms {
		got, r, err := ReadBinary(rest)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		rest = r
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("message %d differs after a round trip:\n got %#v\nwant %#v", i, got, want)
		}
		// The JSON a client would be sent is the same too.
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Fatalf("message %d encodes to other JSON:\n got %s\nwant %s", i, gj, wj)
		}
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left over", len(rest))
	}
	// Map order does not change the encoding.
	a := AppendBinary(nil, &ms[len(ms)-4])
	for range 20 {
		if b := AppendBinary(nil, &ms[len(ms)-4]); string(a) != string(b) {
			t.Fatal("one message, two encodings")
		}
	}
}

// TestBinaryRefusesTruncation: every proper prefix of a message's form is
// refused, never read as another message.
func TestBinaryRefusesTruncation(t *testing.T) {
	ms := binaryCorpus(t)
	b := AppendBinary(nil, &ms[len(ms)-4])
	for n := range len(b) {
		if _, _, err := ReadBinary(b[:n]); err == nil {
			t.Fatalf("a %d-byte prefix of %d bytes decoded", n, len(b))
		}
	}
}

// FuzzReadBinary: any input is refused or decodes to a message whose form
// decodes to it again; never a panic or an allocation far beyond the
// input's size.
func FuzzReadBinary(f *testing.F) {
	for _, m := range binaryCorpus(f) {
		f.Add(AppendBinary(nil, &m))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, err := ReadBinary(data)
		if err != nil {
			return
		}
		// The message shares no memory with the input.
		for i := range data {
			data[i] ^= 0xff
		}
		enc := AppendBinary(nil, &m)
		again, rest, err := ReadBinary(enc)
		if err != nil || len(rest) != 0 {
			t.Fatalf("a decoded message's form does not decode: %v (%d left)", err, len(rest))
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("decode(encode(m)) != m\n  m %#v\nagain %#v", m, again)
		}
	})
}
