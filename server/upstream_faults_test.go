package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
)

// TestUpstreamFaults: for both APIs, streaming and not, an upstream that
// answers 429 or 5xx, takes too long, cuts its answer or sends garbage:
// the client gets the upstream's error as it came (status, headers, body)
// or a 502/504 in its API's shape; the user's message is in the log; and
// the client's retry with the same history is answered without logging
// the message twice.
func TestUpstreamFaults(t *testing.T) {
	type fault struct {
		name       string
		reply      fakellm.Reply
		stream     bool // only for streams; nonStream only for non-streams
		nonStream  bool
		wantStatus int
		passed     bool // the upstream's own error body and headers reach the client
		partial    bool // a 200 whose stream breaks: the partial reply is logged
	}
	faults := []fault{
		{name: "429", reply: fakellm.Reply{Status: 429, RetryAfter: 2 * time.Second}, wantStatus: 429, passed: true},
		{name: "500", reply: fakellm.Reply{Status: 500}, wantStatus: 500, passed: true},
		{name: "503", reply: fakellm.Reply{Status: 503, Body: `{"error":{"message":"overloaded upstream","type":"server_error"}}`}, wantStatus: 503, passed: true},
		{name: "529", reply: fakellm.Reply{Status: 529}, wantStatus: 529, passed: true},
		{name: "timeout", reply: fakellm.Reply{Text: "late", Delay: 3 * time.Second}, wantStatus: 504},
		{name: "cut body", reply: fakellm.Reply{Text: "a reply cut in half by the network", CutAfter: 1}, nonStream: true, wantStatus: 502},
		{name: "cut stream", reply: fakellm.Reply{Text: "a streamed reply that breaks in the middle of its words", CutAfter: 3}, stream: true, wantStatus: 200, partial: true},
		{name: "slow stream", reply: fakellm.Reply{Text: strings.Repeat("slow ", 40), ChunkDelay: 100 * time.Millisecond}, stream: true, wantStatus: 200, partial: true},
	}
	for _, api := range []proxy.API{proxy.OpenAI, proxy.Anthropic} {
		for _, stream := range []bool{false, true} {
			for _, f := range faults {
				if f.stream && !stream || f.nonStream && stream {
					continue
				}
				name := string(api) + "/" + f.name
				if stream {
					name += "/stream"
				}
				t.Run(name, func(t *testing.T) {
					r := startRig(t, rigOpts{pxConfig: func(c *proxy.Config) { c.UpstreamTimeout = 600 * time.Millisecond }})
					path, body := "/v1/chat/completions", chatBody("system", "s", "user", "the user's words")
					if api == proxy.Anthropic {
						path, body = "/v1/messages", anthropicBody("s", "user", "the user's words")
					}
					if stream {
						body = strings.Replace(body, `{"model"`, `{"stream":true,"model"`, 1)
					}
					r.llm.Enqueue(f.reply)
					status, hdr, b := r.do(t, "POST", path, "", body, proxy.HeaderThread, "faults")
					if status != f.wantStatus {
						t.Fatalf("status %d, want %d: %.300s", status, f.wantStatus, b)
					}
					switch {
					case f.passed:
						if f.reply.Body != "" && string(b) != f.reply.Body {
							t.Errorf("body %s, want the upstream's %s", b, f.reply.Body)
						}
						if f.reply.Body == "" {
							checkErrorShape(t, path, b) // fakellm's own error, in the API's shape
						}
						if (status == 429 || status == 529) && hdr.Get("Retry-After") == "" {
							t.Errorf("the upstream's Retry-After did not reach the client: %v", hdr)
						}
					case status >= 500:
						if msg := errorShape(t, api, b); !strings.Contains(msg, "upstream") {
							t.Errorf("message %q", msg)
						}
					}
					got := summary(r.messagesOf(t, "default", "faults"))
					wantLog := []string{"system:s", "user:the user's words"}
					if f.partial {
						if len(got) != 3 || !strings.HasSuffix(got[2], "(partial)") {
							t.Fatalf("log %q: want the user's message and a partial reply", got)
						}
						got = got[:2]
					}
					equalLines(t, "log after the fault", got, wantLog)

					// The client retries with the same history.
					status, hdr, b = r.do(t, "POST", path, "", body, proxy.HeaderThread, "faults")
					if status != http.StatusOK {
						t.Fatalf("retry: %d %.300s", status, b)
					}
					thread := hdr.Get(proxy.HeaderThread)
					if thread == "faults" && hdr.Get(proxy.HeaderForkedFrom) == "faults" {
						// A streamed re-run sent its headers before its
						// reply chose the branch: find the branch.
						thread = r.branchOf(t, "default", "faults")
					}
					got = summary(r.messagesOf(t, "default", thread))
					users, replies := 0, 0
					for _, l := range got {
						if l == "user:the user's words" {
							users++
						}
						if strings.HasPrefix(l, "assistant:") && !strings.HasSuffix(l, "(partial)") {
							replies++
						}
					}
					if users != 1 || replies != 1 {
						t.Errorf("thread %s after the retry: %q, want the user's message once and one whole reply", thread, got)
					}
					switch {
					case f.partial && hdr.Get(proxy.HeaderForkedFrom) != "":
						// The log held a reply the client saw part of: the
						// retry continues in a fork that copies the common
						// part; the original keeps what happened.
						if hdr.Get(proxy.HeaderForkedFrom) != "faults" {
							t.Errorf("forked from %q", hdr.Get(proxy.HeaderForkedFrom))
						}
					case thread != "faults":
						t.Errorf("the retry went to thread %s", thread)
					}
					// And the conversation goes on from there.
					next := chatBody("system", "s", "user", "the user's words", "assistant", replyText(b), "user", "next")
					if api == proxy.Anthropic {
						next = anthropicBody("s", "user", "the user's words", "assistant", replyText(b), "user", "next")
					}
					if status, _, b := r.do(t, "POST", path, "", next, proxy.HeaderThread, "faults"); status != http.StatusOK {
						t.Errorf("the next turn: %d %.300s", status, b)
					}
				})
			}
		}
	}
}
