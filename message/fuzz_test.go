package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

// seedGolden adds the golden inputs of dir to the corpus, whole and as
// their single messages.
func seedGolden(f *testing.F, dir string, messages func([]byte) []byte) {
	for _, in := range goldenInputs(f, dir) {
		data, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		var each []json.RawMessage
		if err := json.Unmarshal(messages(data), &each); err != nil {
			f.Fatal(err)
		}
		for _, m := range each {
			f.Add([]byte(m))
		}
	}
}

// checkDecodeError fails unless err is a *DecodeError.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
	}
	if de.Error() == "" {
		t.Fatal("empty error message")
	}
}

// FuzzDecodeOpenAI checks, for any input, that decoding returns a
// *DecodeError or messages that re-encode without error, decode again to
// equal messages, and encode again to the same bytes.
func FuzzDecodeOpenAI(f *testing.F) {
	seedGolden(f, "openai", func(b []byte) []byte { return b })
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := DecodeOpenAI(data); err != nil {
			checkDecodeError(t, err)
		} else {
			data = append(append([]byte{'['}, data...), ']')
			if _, err := EncodeOpenAI(m); err != nil {
				t.Fatalf("EncodeOpenAI: %v", err)
			}
		}
		ms, err := DecodeOpenAIMessages(data)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		out, err := EncodeOpenAIMessages(ms)
		if err != nil {
			t.Fatalf("encode %q: %v", data, err)
		}
		if !json.Valid(out) {
			t.Fatalf("encoded invalid JSON %q", out)
		}
		again, err := DecodeOpenAIMessages(out)
		if err != nil {
			t.Fatalf("decode of encoded %q: %v", out, err)
		}
		if !reflect.DeepEqual(ms, again) {
			t.Fatalf("decode(encode(m)) != m\n in %q\nout %q\n  m %#v\nagain %#v", data, out, ms, again)
		}
		out2, err := EncodeOpenAIMessages(again)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable: %v\n%q\n%q", err, out, out2)
		}
		if !JSONEqual(out, data) && !openAINormalizes(data) {
			t.Fatalf("encode(decode(x)) != x\n in %q\nout %q", data, out)
		}
	})
}

// FuzzDecodeAnthropic is FuzzDecodeOpenAI for Anthropic messages and the
// system field.
func FuzzDecodeAnthropic(f *testing.F) {
	seedGolden(f, "anthropic", func(b []byte) []byte {
		var req anthropicRequest
		if err := json.Unmarshal(b, &req); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(req.System))
		return req.Messages
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := DecodeAnthropic(data); err != nil {
			checkDecodeError(t, err)
		} else if _, err := EncodeAnthropic(m); err != nil {
			t.Fatalf("EncodeAnthropic: %v", err)
		}
		if sys, err := DecodeAnthropicSystem(data); err != nil {
			checkDecodeError(t, err)
		} else {
			out, _, err := EncodeAnthropicMessages(sys)
			if err != nil {
				t.Fatalf("encode system %q: %v", data, err)
			}
			again, err := DecodeAnthropicSystem(out)
			if err != nil || !reflect.DeepEqual(sys, again) {
				t.Fatalf("system round trip: %v\n in %q\nout %q", err, data, out)
			}
		}
		ms, err := DecodeAnthropicMessages(data)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		sys, out, err := EncodeAnthropicMessages(ms)
		if err != nil {
			t.Fatalf("encode %q: %v", data, err)
		}
		if sys != nil {
			t.Fatalf("system %q from messages", sys)
		}
		if !json.Valid(out) {
			t.Fatalf("encoded invalid JSON %q", out)
		}
		again, err := DecodeAnthropicMessages(out)
		if err != nil {
			t.Fatalf("decode of encoded %q: %v", out, err)
		}
		if !reflect.DeepEqual(ms, again) {
			t.Fatalf("decode(encode(m)) != m\n in %q\nout %q\n  m %#v\nagain %#v", data, out, ms, again)
		}
		_, out2, err := EncodeAnthropicMessages(again)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable: %v\n%q\n%q", err, out, out2)
		}
		if !JSONEqual(out, data) {
			t.Fatalf("encode(decode(x)) != x\n in %q\nout %q", data, out)
		}
	})
}

// openAINormalizes reports whether decoded OpenAI messages leave out a
// field the API requires and the encoder fills in: a tool call's "type"
// ("function") or its arguments (""). These are the only inputs the codec
// does not give back JSON-equal.
func openAINormalizes(data []byte) bool {
	// Keys are read exactly as the codec reads them: encoding/json's struct
	// decoding matches names case-insensitively ("tool_CAlls"), which would
	// make this oracle read another field than the codec does.
	var raw []map[string]json.RawMessage
	if json.Unmarshal(data, &raw) != nil {
		return false
	}
	type msg struct {
		Role      string
		ToolCalls []map[string]json.RawMessage
	}
	var ms []msg
	for _, o := range raw {
		var m msg
		_ = json.Unmarshal(o["role"], &m.Role)
		if b, ok := o["tool_calls"]; ok && json.Unmarshal(b, &m.ToolCalls) != nil {
			return false
		}
		ms = append(ms, m)
	}
	for _, m := range ms {
		if m.Role != "assistant" {
			continue
		}
		for _, c := range m.ToolCalls {
			typ, ok := c["type"]
			if !ok {
				return true
			}
			kind, argKey := "function", "arguments"
			if string(typ) == `"custom"` {
				kind, argKey = "custom", "input"
			}
			var fn map[string]json.RawMessage
			if json.Unmarshal(c[kind], &fn) == nil {
				if _, ok := fn[argKey]; !ok {
					return true
				}
			}
		}
	}
	return false
}
