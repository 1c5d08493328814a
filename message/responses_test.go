package message

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Responses items: decoding then encoding gives the items back (JSON-equal,
// unknown fields and item kinds included), and the decoded form is pinned
// by golden files.
func TestGoldenResponses(t *testing.T) {
	for _, in := range goldenInputs(t, "responses") {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var out []byte
			if strings.HasPrefix(filepath.Base(in), "output") {
				m, err := DecodeResponsesOutput(data)
				if err != nil {
					t.Fatal(err)
				}
				checkDecoded(t, in, []Message{m})
				if out, err = EncodeResponsesOutput(m); err != nil {
					t.Fatal(err)
				}
			} else {
				ms, err := DecodeResponsesInput(data)
				if err != nil {
					t.Fatal(err)
				}
				checkDecoded(t, in, ms)
				if out, err = EncodeResponsesInput(ms); err != nil {
					t.Fatal(err)
				}
				// The log keeps messages as JSON: what comes back from it
				// encodes the same.
				stored, _ := json.Marshal(ms)
				var back []Message
				if err := json.Unmarshal(stored, &back); err != nil {
					t.Fatal(err)
				}
				again, err := EncodeResponsesInput(back)
				if err != nil || !JSONEqual(again, out) {
					t.Errorf("after a JSON round trip the encoding differs (%v):\n%s\n%s", err, again, out)
				}
			}
			if !JSONEqual(out, data) {
				t.Errorf("encode(decode(x)) != x:\n got %s\nwant %s", out, data)
			}
		})
	}
}

// The model's turn stays one assistant message however many items it
// spans, and calls pair with their outputs by call_id.
func TestResponsesGrouping(t *testing.T) {
	ms, err := DecodeResponsesInput([]byte(`[
		{"role":"user","content":"hi"},
		{"type":"reasoning","summary":[],"encrypted_content":"e1"},
		{"type":"function_call","call_id":"a","name":"f","arguments":"{}"},
		{"type":"function_call","call_id":"b","name":"g","arguments":"{}"},
		{"type":"function_call_output","call_id":"a","output":"1"},
		{"type":"function_call_output","call_id":"b","output":"2"},
		{"role":"assistant","content":[{"type":"output_text","text":"ok"}]}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range ms {
		roles = append(roles, string(m.Role))
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,tool,assistant" {
		t.Fatalf("roles %s", got)
	}
	if ids := ms[1].ToolCallIDs(); strings.Join(ids, ",") != "a,b" {
		t.Fatalf("calls %v", ids)
	}
	if ids := ms[2].ResultIDs(); len(ids) != 1 || ids[0] != "a" || !ms[2].IsToolResult() {
		t.Fatalf("result %v", ids)
	}
	if ms[1].Parts[0].Type != Reasoning || ms[1].Parts[0].Signature != "e1" {
		t.Fatalf("reasoning %+v", ms[1].Parts[0])
	}
}

// Messages from elsewhere (the window's own, another API's) encode as
// valid items.
func TestResponsesCanonical(t *testing.T) {
	ms := []Message{
		NewText(System, "sys"),
		NewText(User, "memory block"),
		NewToolCalls("", Part{ToolCallID: "c1", ToolName: "mneme_search", Arguments: `{"query":"x"}`}),
		NewToolResult("c1", "found"),
		NewText(Assistant, "answer"),
	}
	out, err := EncodeResponsesInput(ms)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"system","content":"sys"},{"role":"user","content":"memory block"},` +
		`{"type":"function_call","call_id":"c1","name":"mneme_search","arguments":"{\"query\":\"x\"}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"found"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer"}]}]`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

func TestResponsesDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{}`, "input: want a string or an array of items"},
		{`[{"content":"x"}]`, "input[0].type: missing"},
		{`[{"role":"robot","content":"x"}]`, `input[0].role: unknown role "robot"`},
		{`[{"role":"user"}]`, "input[0].content: missing"},
		{`[{"role":"user","content":[{"type":"input_text"}]}]`, "input[0].content[0].text: missing"},
		{`[{"type":"function_call","name":"f","arguments":"{}"}]`, "input[0].call_id: missing"},
		{`[{"type":"function_call","call_id":"a","name":"f","arguments":{}}]`, "input[0].arguments: want string"},
		{`[{"type":"function_call_output","call_id":"a"}]`, "input[0].output: missing"},
		{`[{"type":"function_call_output","output":"x"}]`, "input[0].call_id: missing"},
		{`[{"type":"computer_call_output","output":{}}]`, "input[0].call_id: missing"},
		{`[1]`, "input[0]: want object"},
		{`[{"role":"user","content":"x"}`, "input[0]: invalid JSON"},
	} {
		_, err := DecodeResponsesInput([]byte(tc.in))
		var de *DecodeError
		if !errors.As(err, &de) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

// FuzzDecodeResponsesInput checks, for any input, that decoding returns a
// *DecodeError or messages that encode without error, and that what they
// encode to decodes and encodes again to the same bytes.
func FuzzDecodeResponsesInput(f *testing.F) {
	for _, in := range goldenInputs(f, "responses") {
		data, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		var items []json.RawMessage
		if err := json.Unmarshal(data, &items); err != nil {
			f.Fatal(err)
		}
		for _, it := range items {
			f.Add(append(append([]byte{'['}, it...), ']'))
		}
	}
	f.Add([]byte(`"just text"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := DecodeResponsesOutput(data); err != nil {
			checkDecodeError(t, err)
		} else if _, err := EncodeResponsesOutput(m); err != nil {
			t.Fatalf("EncodeResponsesOutput: %v", err)
		}
		ms, err := DecodeResponsesInput(data)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		out, err := EncodeResponsesInput(ms)
		if err != nil {
			t.Fatalf("EncodeResponsesInput: %v", err)
		}
		ms2, err := DecodeResponsesInput(out)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		out2, err := EncodeResponsesInput(ms2)
		if err != nil || string(out2) != string(out) {
			t.Fatalf("not stable (%v):\n%s\n%s", err, out, out2)
		}
	})
}
