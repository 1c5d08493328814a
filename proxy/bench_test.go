package proxy

import (
	"fmt"
	"github.com/mnemehq/mneme/message"
	"strings"
	"testing"
	"time"
)

// benchBody is a Chat Completions request of n messages as an agent sends
// it: a system prompt, a task, then rounds of an assistant tool call and a
// ~2 KB tool result with escapes and non-ASCII, as real tool output has.
func benchBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-4o-mini","temperature":0.2,"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}],"messages":[`)
	b.WriteString(`{"role":"system","content":"You are a coding agent. Use the tools to read and edit files."},`)
	b.WriteString(`{"role":"user","content":"Find why TestParse fails in ./internal/parse and fix it."}`)
	result := strings.Repeat(`func parse(s string) (int, error) {\n\treturn strconv.Atoi(s) // «naïve»\n}\n`, 25)
	for i := 2; i < n; i += 2 {
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Reading file %d.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"internal/parse/file%d.go\"}"}}]}`, i, i, i)
		if i+1 < n {
			fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"%s"}`, i, result)
		}
	}
	b.WriteString(`],"stream":false}`)
	return []byte(b.String())
}

// BenchmarkDecodeRequest is the proxy's reading of a request before the
// engine sees it (checkBody, parseChecked and checkFields, the messages'
// codec, checkConversation), at 58 and 500 messages, with each stage's µs
// per request: the part of the proxy's overhead that is its own.
//
//	go test ./proxy/ -run '^$' -bench DecodeRequest
func BenchmarkDecodeRequest(b *testing.B) {
	for _, n := range []int{58, 500} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			body := benchBody(n)
			var stages [4]time.Duration
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				if err := checkBody(body); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				req, err := parseChecked(body)
				if err == nil {
					err = checkFields(req)
				}
				if err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				msgs, err := openAIDialect{}.messages(req)
				if err != nil || len(msgs) != n {
					b.Fatalf("%d messages, %v", len(msgs), err)
				}
				t3 := time.Now()
				if err := checkConversation(msgs, ModeResend, OpenAI); err != nil {
					b.Fatal(err)
				}
				stages[0] += t1.Sub(t0)
				stages[1] += t2.Sub(t1)
				stages[2] += t3.Sub(t2)
				stages[3] += time.Since(t3)
			}
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
			b.ReportMetric(us(stages[0]), "checkBody-µs")
			b.ReportMetric(us(stages[1]), "parseChecked-µs")
			b.ReportMetric(us(stages[2]), "messages-µs")
			b.ReportMetric(us(stages[3]), "checkConversation-µs")
			b.ReportMetric(us(stages[0]+stages[1]+stages[2]+stages[3]), "µs/request")
		})
	}
}

// BenchmarkResendRequest is the proxy's reading of a resend client's
// request whose messages it has seen before, all but the last two: the
// check of the body through the checked elements, and the messages taken
// from the decode cache.
//
//	go test ./proxy/ -run '^$' -bench ResendRequest
func BenchmarkResendRequest(b *testing.B) {
	for _, n := range []int{58, 500} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			prev, body := benchBody(n-2), benchBody(n)
			cache := message.NewCache(0)
			set := newCheckedSet(cache.Hash)
			d := openAIDialect{cache.For("t")}
			for _, bd := range [][]byte{prev, body} {
				req, err := set.check("t", bd)
				if err != nil || req == nil {
					b.Fatal(req, err)
				}
				if _, err := d.messages(req); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req, err := set.check("t", body)
				if err != nil {
					b.Fatal(err)
				}
				if msgs, err := d.messages(req); err != nil || len(msgs) != n {
					b.Fatal(len(msgs), err)
				}
			}
		})
	}
}
