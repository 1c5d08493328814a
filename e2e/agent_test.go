package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mnemehq/mneme/proxy"
)

// chatMsg is an OpenAI chat message as an agent keeps it.
type chatMsg struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func text(s string) *string { return &s }

// render is a message's meaning as one line (role, text, tool calls and
// results): what the log's copy of it must match.
func (m chatMsg) render() string {
	var b strings.Builder
	b.WriteString(m.Role)
	if m.ToolCallID != "" {
		b.WriteString(" result " + m.ToolCallID)
	}
	b.WriteString(": ")
	if m.Content != nil {
		b.WriteString(*m.Content)
	}
	for _, c := range m.ToolCalls {
		fmt.Fprintf(&b, " [call %s %s %s]", c.ID, c.Function.Name, c.Function.Arguments)
	}
	return b.String()
}

var lookupTool = json.RawMessage(`[{"type":"function","function":{"name":"lookup","description":"Look up an order, an invoice or a ticket by id.","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}]`)

// agent is one client session: a thread it resends whole on every call,
// as agents do. history holds what was acknowledged (every message of an
// answered request, and the answer); pending what the next request adds.
// An agent is used by one goroutine.
type agent struct {
	id      int
	thread  string
	history []chatMsg
	pending []chatMsg
	turn    int

	acked   atomic.Int64 // requests answered 200 (read by the test while the agent runs)
	retries int          // attempts that got no answer (or a 5xx) and were sent again
	forks   int          // answers that came from a fork of the thread
}

func newAgent(id int, thread string) *agent {
	a := &agent{id: id, thread: thread}
	a.pending = []chatMsg{
		{Role: "system", Content: text(fmt.Sprintf("You are support agent %d of the shop. Tools: lookup. Answer with order ids verbatim.", id))},
	}
	a.pending = append(a.pending, a.userMessage())
	return a
}

// userMessage is the next user turn: unique (it starts with the agent's
// and the turn's number), with ids and numbers the summaries keep, and
// every third one asks for the lookup tool.
func (a *agent) userMessage() chatMsg {
	a.turn++
	var b strings.Builder
	fmt.Fprintf(&b, "[c%02d u%04d] Customer asks about order ORD-%d-%04d shipped to warehouse_%d; the invoice INV-%05d shows %d.%02d EUR. ",
		a.id, a.turn, a.id, a.turn, a.turn%7, a.id*10000+a.turn, 10+a.turn%90, a.turn%100)
	b.WriteString("They mention the parcel was rerouted through the depot in Lyon and want a refund if it is late again. ")
	if a.turn%3 == 0 {
		b.WriteString("Please check it " + toolAsk + ".")
	}
	return chatMsg{Role: "user", Content: text(b.String())}
}

// toolResult is what the agent's lookup tool returns for call.
func (a *agent) toolResult(call toolCall) chatMsg {
	var b strings.Builder
	fmt.Fprintf(&b, "[c%02d r%04d] lookup %s:\n", a.id, a.turn, call.Function.Arguments)
	for i := range 6 {
		fmt.Fprintf(&b, "event_%d: ORD-%d-%04d scanned at hub_%d on day %d (status code %d)\n", i, a.id, a.turn, i*3+a.turn%5, a.turn+i, 200+i)
	}
	return chatMsg{Role: "tool", ToolCallID: call.ID, Content: text(b.String())}
}

// body is the next request: the whole history and what is new.
func (a *agent) body() []byte {
	msgs := append(append([]chatMsg(nil), a.history...), a.pending...)
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": msgs, "tools": lookupTool})
	return b
}

// acknowledge takes an answered request's reply: the request's messages
// and the reply join the history, and the next messages are chosen.
func (a *agent) acknowledge(reply chatMsg) {
	a.history = append(append(a.history, a.pending...), reply)
	a.pending = nil
	for _, c := range reply.ToolCalls {
		a.pending = append(a.pending, a.toolResult(c))
	}
	if len(a.pending) == 0 {
		a.pending = []chatMsg{a.userMessage()}
	}
	a.acked.Add(1)
}

// errRejected is an answer the proxy must never give to these requests.
var errRejected = errors.New("request rejected")

// step sends the next request until it is answered. pick returns the base
// URL of the server to try for an attempt ("" when none is up). An attempt
// that gets no answer or a 5xx is sent again with the same history, as a
// client retries; a 4xx is a failure. It gives up when ctx ends.
func (a *agent) step(ctx context.Context, hc *http.Client, pick func(attempt int) string) error {
	body := a.body()
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			a.retries++
			select {
			case <-ctx.Done():
				return fmt.Errorf("agent %d turn %d: gave up after %d attempts: %w (last: %v)", a.id, a.turn, attempt, ctx.Err(), last)
			case <-time.After(time.Duration(min(attempt, 10)) * 20 * time.Millisecond):
			}
		}
		base := pick(attempt)
		if base == "" {
			last = errors.New("no server up")
			continue
		}
		reply, forked, status, err := a.send(ctx, hc, base, body)
		switch {
		case err != nil:
			last = err
			continue
		case status >= 500:
			last = fmt.Errorf("status %d", status)
			continue
		case status != http.StatusOK:
			return fmt.Errorf("agent %d turn %d: %w: status %d", a.id, a.turn, errRejected, status)
		}
		if forked {
			a.forks++
		}
		a.acknowledge(reply)
		return nil
	}
}

func (a *agent) send(ctx context.Context, hc *http.Client, base string, body []byte) (reply chatMsg, forked bool, status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return reply, false, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(proxy.HeaderThread, a.thread)
	resp, err := hc.Do(req)
	if err != nil {
		return reply, false, 0, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply, false, 0, err // an answer cut by a kill is no answer
	}
	if resp.StatusCode != http.StatusOK {
		return reply, false, resp.StatusCode, nil
	}
	var cc struct {
		Choices []struct {
			Message chatMsg `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(rb, &cc); err != nil || len(cc.Choices) != 1 {
		return reply, false, 0, fmt.Errorf("unreadable answer %.200s", rb)
	}
	reply = cc.Choices[0].Message
	reply.Role = "assistant"
	if reply.Content != nil && *reply.Content == "" && len(reply.ToolCalls) > 0 {
		reply.Content = nil
	}
	return reply, resp.Header.Get(proxy.HeaderForkedFrom) != "", http.StatusOK, nil
}

// load runs agents until stop is closed, each finishing the request it is
// on (within hard), and returns their first errors. pick chooses the
// server for agent a's attempt.
func runAgents(stop <-chan struct{}, hard context.Context, agents []*agent, pick func(a *agent, attempt int) string) []error {
	hc := &http.Client{Timeout: 60 * time.Second}
	errs := make([]error, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := a.step(hard, hc, func(attempt int) string { return pick(a, attempt) }); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errs
}
