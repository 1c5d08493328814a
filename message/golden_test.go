package message

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the *.decoded.json golden files")

// goldenInputs lists the input files under testdata/dir (not the
// *.decoded.json outputs).
func goldenInputs(t testing.TB, dir string) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, f := range all {
		if !strings.HasSuffix(f, ".decoded.json") {
			in = append(in, f)
		}
	}
	if len(in) == 0 {
		t.Fatalf("no golden inputs in testdata/%s", dir)
	}
	return in
}

// checkDecoded compares the decoded messages with the golden
// <input>.decoded.json, or rewrites it under -update.
func checkDecoded(t *testing.T, input string, ms []Message) {
	t.Helper()
	got, err := json.MarshalIndent(ms, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := strings.TrimSuffix(input, ".json") + ".decoded.json"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./message -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("decoded %s differs from %s:\n%s", input, golden, got)
	}
}

func TestGoldenOpenAI(t *testing.T) {
	for _, in := range goldenInputs(t, "openai") {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := DecodeOpenAIMessages(data)
			if err != nil {
				t.Fatal(err)
			}
			checkDecoded(t, in, ms)
			out, err := EncodeOpenAIMessages(ms)
			if err != nil {
				t.Fatal(err)
			}
			if !JSONEqual(out, data) {
				t.Errorf("encode(decode(x)) != x:\n got %s\nwant %s", out, data)
			}
			// One message at a time gives the same.
			var each []json.RawMessage
			for _, m := range ms {
				rs, err := EncodeOpenAI(m)
				if err != nil {
					t.Fatal(err)
				}
				each = append(each, rs...)
			}
			joined, _ := json.Marshal(each)
			if !JSONEqual(joined, data) {
				t.Errorf("EncodeOpenAI one by one != x:\n got %s", joined)
			}
		})
	}
}

// anthropicRequest is the part of an Anthropic Messages request the golden
// files hold.
type anthropicRequest struct {
	System   json.RawMessage `json:"system,omitempty"`
	Messages json.RawMessage `json:"messages"`
}

func decodeAnthropicRequest(data []byte) ([]Message, error) {
	var req anthropicRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, err
	}
	sys, err := DecodeAnthropicSystem(req.System)
	if err != nil {
		return nil, err
	}
	ms, err := DecodeAnthropicMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	return append(sys, ms...), nil
}

func encodeAnthropicRequest(ms []Message) ([]byte, error) {
	sys, msgs, err := EncodeAnthropicMessages(ms)
	if err != nil {
		return nil, err
	}
	// Built by hand: json.Marshal would compact the raw values.
	var b []byte
	b = append(b, '{')
	if sys != nil {
		b = append(append(append(b, `"system":`...), sys...), ',')
	}
	b = append(append(b, `"messages":`...), msgs...)
	return append(b, '}'), nil
}

func TestGoldenAnthropic(t *testing.T) {
	for _, in := range goldenInputs(t, "anthropic") {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := decodeAnthropicRequest(data)
			if err != nil {
				t.Fatal(err)
			}
			checkDecoded(t, in, ms)
			out, err := encodeAnthropicRequest(ms)
			if err != nil {
				t.Fatal(err)
			}
			if !JSONEqual(out, data) {
				t.Errorf("encode(decode(x)) != x:\n got %s\nwant %s", out, data)
			}
		})
	}
}
