package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mnemehq/mneme/internal/fakellm"
)

// model is the scripted model every test talks to: the agents' upstream
// and the replicas' summarizer. It runs in the test process (a real HTTP
// server on a loopback port) rather than as a `mneme fakellm` process, for
// two reasons: it scripts tool calls, which the CLI's default answers never
// make, and it counts the summarizer requests of each replica exactly.
//
// Summarizer requests come in under /sum/NAME/ (each replica's
// --summarizer-url names it), so a request tells which replica made it.
type model struct {
	fake *fakellm.Server
	srv  *httptest.Server

	mu       sync.Mutex
	answered map[string]int // NAME/observer and NAME/reflector: summarizer requests answered
	agent    int            // agent requests answered
	hang     map[string]bool
	hung     chan hungCall // a summarizer request now held by hang
	release  chan struct{} // closed when the test ends: held requests return
}

// hungCall is a summarizer request held open.
type hungCall struct {
	replica string
	body    []byte
}

func startModel(t testing.TB) *model {
	m := &model{
		fake:     fakellm.New(fakellm.WithHandler(agentReply)),
		answered: map[string]int{},
		hang:     map[string]bool{},
		hung:     make(chan hungCall, 64),
		release:  make(chan struct{}),
	}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(func() {
		close(m.release)
		m.srv.Close()
	})
	return m
}

// upstream is the agents' OpenAI base URL.
func (m *model) upstream() string { return m.srv.URL }

// summarizerURL is the summarizer base URL of the replica called name.
func (m *model) summarizerURL(name string) string { return m.srv.URL + "/sum/" + name }

// summarizerModel is the summarizer model name the replica called name
// uses: the compacted events it writes carry it.
func summarizerModel(name string) string { return "gpt-4o-mini-" + name }

// hangSummarizer makes the replica's observer requests hang (until the
// caller goes away) from now on.
func (m *model) hangSummarizer(name string) {
	m.mu.Lock()
	m.hang[name] = true
	m.mu.Unlock()
}

// count returns how many requests of a kind (NAME/observer,
// NAME/reflector) were answered.
func (m *model) count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.answered[key]
}

func (m *model) serve(w http.ResponseWriter, r *http.Request) {
	replica := ""
	if rest, ok := strings.CutPrefix(r.URL.Path, "/sum/"); ok {
		replica, rest, _ = strings.Cut(rest, "/")
		r.URL.Path = "/" + rest
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	kind := "agent"
	switch {
	case bytes.Contains(body, []byte(fakellm.MarkerObserver)):
		kind = "observer"
	case bytes.Contains(body, []byte(fakellm.MarkerReflector)):
		kind = "reflector"
	}
	m.mu.Lock()
	hang := replica != "" && kind == "observer" && m.hang[replica]
	m.mu.Unlock()
	if hang {
		select {
		case m.hung <- hungCall{replica: replica, body: body}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-m.release:
		}
		return
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	m.fake.Handler().ServeHTTP(rec, r)
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec.status != http.StatusOK {
		return
	}
	if replica != "" {
		m.answered[replica+"/"+kind]++
	} else {
		m.agent++
		if m.agent%256 == 0 {
			m.fake.Reset() // the fake records every request: keep memory flat
		}
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// toolAsk in a user message makes the model call the lookup tool.
const toolAsk = "#lookup"

// agentReply is the scripted model. Its answer is a function of the last
// message of the window alone (which every window keeps: it is what the
// client just sent), so a retried request gets the very same answer, tool
// call ids included, whatever was compacted meanwhile. Summaries are the
// fake's extractive ones, cut short so that they always fit.
func agentReply(r fakellm.Request) fakellm.Reply {
	if r.IsSummarization() {
		rep := fakellm.DefaultReply(r)
		lines := strings.Split(rep.Text, "\n")
		keep := 6
		if strings.Contains(r.System, fakellm.MarkerReflector) {
			keep = 3
		}
		rep.Text = strings.Join(lines[:min(len(lines), keep)], "\n")
		return rep
	}
	if len(r.Messages) == 0 {
		return fakellm.DefaultReply(r)
	}
	last := r.Messages[len(r.Messages)-1]
	text := flatText(last["content"])
	switch last["role"] {
	case "tool":
		return fakellm.Reply{Text: "noted: " + firstRunes(text, 70)}
	case "user":
		if strings.Contains(text, toolAsk) {
			h := sha256.Sum256([]byte(text))
			mark := firstRunes(text, 13)
			return fakellm.Reply{
				Text:      "Looking up " + mark + ".",
				ToolCalls: []fakellm.ToolCall{{ID: "call_" + hex.EncodeToString(h[:8]), Name: "lookup", Arguments: `{"q":"` + mark + `"}`}},
			}
		}
	}
	return fakellm.DefaultReply(r)
}

// flatText is the text of an OpenAI message content: a string or parts.
func flatText(c any) string {
	switch c := c.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if pm, ok := p.(map[string]any); ok {
				if s, ok := pm["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

func firstRunes(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) > n {
		r = r[:n]
	}
	return string(r)
}
