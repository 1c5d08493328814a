package message

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchRequest builds the messages array of a typical agent request of n
// messages: a system prompt, a task, then rounds of an assistant tool call
// and a ~2 KB tool result, with some escapes and non-ASCII as real output
// has.
func benchRequest(n int) []byte {
	var b strings.Builder
	b.WriteString(`[{"role":"system","content":"You are a coding agent. Use the tools to read and edit files."},`)
	b.WriteString(`{"role":"user","content":"Find why TestParse fails in ./internal/parse and fix it."}`)
	result := strings.Repeat(`func parse(s string) (int, error) {\n\treturn strconv.Atoi(s) // «naïve»\n}\n`, 25)
	for i := 2; i < n; i += 2 {
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Reading file %d.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"internal/parse/file%d.go\"}"}}]}`, i, i, i)
		if i+1 < n {
			fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"%s"}`, i, result)
		}
	}
	b.WriteString("]")
	return []byte(b.String())
}

func BenchmarkDecodeOpenAIMessages(b *testing.B) {
	data := benchRequest(50)
	if ms, err := DecodeOpenAIMessages(data); err != nil || len(ms) != 50 {
		b.Fatalf("%d messages, %v", len(ms), err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeOpenAIMessages(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/request")
}

// BenchmarkDecodeOpenAIMessagesStdlib is the yardstick: encoding/json
// decoding the same request into generic maps (which keeps no raw bytes
// and checks nothing).
func BenchmarkDecodeOpenAIMessagesStdlib(b *testing.B) {
	data := benchRequest(50)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var v []map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeOpenAIMessages(b *testing.B) {
	data := benchRequest(50)
	ms, err := DecodeOpenAIMessages(data)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeOpenAIMessages(ms); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeAnthropicMessages(b *testing.B) {
	ms, err := DecodeOpenAIMessages(benchRequest(50))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := EncodeAnthropicMessages(ms); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHostile decodes and re-encodes inputs built to find quadratic
// paths (many keys, many duplicates, deep nesting): each must cost about
// its size, like the 54 KB request above.
func BenchmarkHostile(b *testing.B) {
	var keys, dups strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&keys, `,"k%d":%d`, i, i)
		fmt.Fprintf(&dups, `,"detail":"","x%d":1`, i)
	}
	deep := strings.Repeat("[", maxDepth-10) + strings.Repeat("]", maxDepth-10)
	inputs := map[string]string{
		"many-keys":   `[{"role":"user","content":"x"` + keys.String() + `}]`,
		"dup-detail":  `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"` + dups.String() + `}}]}]`,
		"deep-extra":  `[{"role":"user","content":"x","deep":` + deep + `}]`,
		"deep-opaque": `[{"role":"user","content":[{"type":"x","v":` + deep + `}]}]`,
	}
	for name, in := range inputs {
		b.Run(name, func(b *testing.B) {
			data := []byte(in)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				ms, err := DecodeOpenAIMessages(data)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := EncodeOpenAIMessages(ms); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
