package server_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
)

// The property test of issue 15: random client behaviour against `mneme
// serve`, every acknowledged message checked against an oracle of what
// each branch's log must hold.

// pmsg is one message of a simulated client's history.
type pmsg struct {
	role, text string
	calls      []string // tool call ids (assistant)
	callID     string   // the call a tool message answers
}

// line is how the oracle compares a message with the log: what the model
// sees, as the log's summary spells it.
func (m pmsg) line() string {
	if m.role == "tool" {
		return "tool:[result " + m.text + "]"
	}
	var b strings.Builder
	b.WriteString(m.role + ":" + m.text)
	for range m.calls {
		b.WriteString(`[call grep {"q":"x"}]`)
	}
	return b.String()
}

// encode writes m in one of the spellings a client SDK may use: the oracle
// must not see the difference, nor must the thread fork on it.
func encode(m pmsg, rng *rand.Rand) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	switch m.role {
	case "tool":
		return `{"role":"tool","tool_call_id":` + q(m.callID) + `,"content":` + q(m.text) + `}`
	case "assistant":
		var calls string
		if len(m.calls) > 0 {
			var cs []string
			for _, id := range m.calls {
				args := `{"q":"x"}`
				if rng.IntN(2) == 0 {
					args = `{ "q" : "x" }`
				}
				cs = append(cs, `{"id":`+q(id)+`,"type":"function","function":{"name":"grep","arguments":`+q(args)+`}}`)
			}
			calls = `,"tool_calls":[` + strings.Join(cs, ",") + `]`
		}
		content := q(m.text)
		switch {
		case m.text == "" && rng.IntN(2) == 0:
			content = "null"
		case m.text == "":
		case rng.IntN(3) == 0:
			k := len(m.text) / 2
			content = `[{"type":"text","text":` + q(m.text[:k]) + `},{"type":"text","text":` + q(m.text[k:]) + `}]`
		}
		switch rng.IntN(3) {
		case 0:
			return `{"role":"assistant","content":` + content + calls + `}`
		case 1:
			return `{"content":` + content + `,"refusal":null,"annotations":[]` + calls + `,"role":"assistant"}`
		default:
			if m.text == "" {
				return `{"role":"assistant"` + calls + `}`
			}
			return `{"role":"assistant","content":` + content + calls + `,"refusal":null}`
		}
	}
	if rng.IntN(3) == 0 {
		return `{"role":` + q(m.role) + `,"content":[{"type":"text","text":` + q(m.text) + `}]}`
	}
	return `{"role":` + q(m.role) + `,"content":` + q(m.text) + `}`
}

// pclient is one simulated client.
type pclient struct {
	id      int
	named   string // X-Mneme-Thread ("" for a derived id)
	append  bool   // X-Mneme-Mode: append
	dynamic bool   // its system prompt changes every call
	hist    []pmsg // its conversation, system prompt excluded
	sent    int    // append mode: how much of hist the log has
	thread  string // where its last acknowledged request went
	calls   atomic.Int64
}

// ack is one acknowledged exchange: the thread the answer named must hold
// conv (the conversation as the client saw it then) as a prefix.
type ack struct {
	thread string
	conv   []string
	epoch  int // the thread's deletions when it was acknowledged
	op     string
}

type propRun struct {
	t      *testing.T
	r      *rig
	rng    *rand.Rand
	mu     sync.Mutex
	acks   []ack
	epochs map[string]int // deletions per thread id
	holds  chan chan struct{}
	seq    atomic.Int64
}

func (p *propRun) epoch(thread string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epochs[thread]
}

// send posts the client's next request (hist plus fresh), and on success
// returns the reply and the thread; the caller decides what the client
// keeps.
func (p *propRun) send(c *pclient, hist []pmsg, rng *rand.Rand) (pmsg, string, string, error) {
	call := c.calls.Add(1)
	var parts []string
	if !c.append || c.sent == 0 {
		sys := "You are a careful agent."
		if c.dynamic {
			sys = fmt.Sprintf("You are a careful agent. Call %d.", call)
		}
		parts = append(parts, encode(pmsg{role: "system", text: sys}, rng))
	}
	from := 0
	if c.append {
		from = c.sent
	}
	for _, m := range hist[from:] {
		parts = append(parts, encode(m, rng))
	}
	body := `{"model":"gpt-4o-mini","messages":[` + strings.Join(parts, ",") + `]}`
	var hdr []string
	if c.named != "" {
		hdr = append(hdr, proxy.HeaderThread, c.named)
	}
	if c.append {
		hdr = append(hdr, proxy.HeaderMode, proxy.ModeAppend)
	}
	status, h, b := p.r.do(p.t, "POST", "/v1/chat/completions", "", body, hdr...)
	if status != 200 {
		return pmsg{}, "", "", fmt.Errorf("client %d: status %d: %.400s\nrequest: %.2000s", c.id, status, b, body)
	}
	var cc struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &cc); err != nil || len(cc.Choices) == 0 {
		return pmsg{}, "", "", fmt.Errorf("client %d: reply %s", c.id, b)
	}
	reply := pmsg{role: "assistant"}
	if s := cc.Choices[0].Message.Content; s != nil {
		reply.text = *s
	}
	for _, tc := range cc.Choices[0].Message.ToolCalls {
		reply.calls = append(reply.calls, tc.ID)
	}
	return reply, h.Get(proxy.HeaderThread), h.Get(proxy.HeaderForkedFrom), nil
}

func lines(ms []pmsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.line()
	}
	return out
}

// exchange sends hist and records the acknowledged conversation.
func (p *propRun) exchange(c *pclient, hist []pmsg, op string, rng *rand.Rand) ([]pmsg, string, string, error) {
	reply, thread, forked, err := p.send(c, hist, rng)
	if err != nil {
		return nil, "", "", err
	}
	out := append(append([]pmsg(nil), hist...), reply)
	conv := lines(out)
	if c.append {
		conv = nil // checked by the client's own log below
	}
	if op == "delete" {
		conv = nil // its thread was deleted while it ran: nothing to hold
	}
	p.mu.Lock()
	p.acks = append(p.acks, ack{thread: thread, conv: conv, epoch: p.epochs[thread], op: op})
	p.mu.Unlock()
	return out, thread, forked, nil
}

// TestPropertyClients drives random client behaviour and checks every
// acknowledged message against what each branch's log must hold: nothing
// lost, nothing doubled, no 5xx, no valid request refused.
func TestPropertyClients(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { propertyRun(t, seed, 150) })
	}
}

func propertyRun(t *testing.T, seed uint64, steps int) {
	p := &propRun{t: t, rng: rand.New(rand.NewPCG(seed, 15)), epochs: map[string]int{}, holds: make(chan chan struct{}, 8)}
	var replies atomic.Int64
	var held sync.Map // a held request is held once: a later re-run of it is not
	p.r = startRig(t, rigOpts{budget: 6000, llmOpts: []fakellm.Option{fakellm.WithHandler(func(q fakellm.Request) fakellm.Reply {
		last := q.Messages[len(q.Messages)-1]
		if _, again := held.LoadOrStore(q.LastUserText, true); strings.Contains(q.LastUserText, "#hold") && last["role"] == "user" && !again {
			gate := make(chan struct{})
			p.holds <- gate
			<-gate
		}
		if strings.Contains(q.LastUserText, "#tool") && last["role"] == "user" {
			return fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: fmt.Sprintf("call_%d", replies.Add(1)), Name: "grep", Arguments: `{"q":"x"}`}}}
		}
		if strings.Contains(q.LastUserText, "#same") {
			return fakellm.Reply{Text: "same answer to " + q.LastUserText}
		}
		return fakellm.Reply{Text: fmt.Sprintf("answer %d to %s", replies.Add(1), q.LastUserText)}
	})}})
	clients := []*pclient{
		{id: 0, named: "named-0"},
		{id: 1},
		{id: 2, named: "named-2", dynamic: true},
		{id: 3, dynamic: true},
		{id: 4, named: "app-4", append: true},
		{id: 5, named: "app-5", append: true, dynamic: true},
	}
	fail := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	user := func(c *pclient, tag string) pmsg {
		return pmsg{role: "user", text: fmt.Sprintf("c%d step %d %s", c.id, p.seq.Add(1), tag)}
	}
	// Every client begins with a first request.
	for _, c := range clients {
		c.hist = []pmsg{{role: "user", text: fmt.Sprintf("c%d: goal", c.id)}}
		h, th, _, err := p.exchange(c, c.hist, "first", p.rng)
		fail(err)
		c.hist, c.thread, c.sent = h, th, len(h)
	}
	// The ids the fakellm gives the tool calls of replies: a tool result
	// must answer them.
	answerCalls := func(c *pclient) {
		last := c.hist[len(c.hist)-1]
		for _, id := range last.calls {
			c.hist = append(c.hist, pmsg{role: "tool", callID: id, text: "result of " + id})
		}
	}
	for step := 0; step < steps; step++ {
		c := clients[p.rng.IntN(len(clients))]
		rng := rand.New(rand.NewPCG(seed, uint64(step)))
		ops := []string{"next", "next", "tool", "inject"}
		if !c.append {
			ops = append(ops, "edit", "regenerate", "rerun", "burst", "delete")
		}
		op := ops[p.rng.IntN(len(ops))]
		answerCalls(c)
		before := c.thread
		switch op {
		case "next", "tool":
			tag := ""
			if op == "tool" {
				tag = "#tool"
			}
			if p.rng.IntN(4) == 0 {
				tag += " #same"
			}
			h, th, forked, err := p.exchange(c, append(c.hist, user(c, tag)), op, rng)
			fail(err)
			if th != before && p.epoch(before) == 0 {
				t.Errorf("client %d %s: went from %s to %s (forked from %q): a history that goes on must not fork", c.id, op, before, th, forked)
			}
			c.hist, c.thread, c.sent = h, th, len(h)
		case "inject":
			// A harness adds its own tool call after the model's text reply.
			if last := c.hist[len(c.hist)-1]; last.role != "assistant" || len(last.calls) > 0 {
				continue
			}
			id := fmt.Sprintf("own_%d", p.seq.Add(1))
			hist := append(c.hist, pmsg{role: "assistant", calls: []string{id}}, pmsg{role: "tool", callID: id, text: "own result " + id})
			h, th, forked, err := p.exchange(c, hist, op, rng)
			fail(err)
			if th != before {
				t.Errorf("client %d inject: went from %s to %s (forked from %q)\nlog %q\nhist %q", c.id, before, th, forked, summary(p.r.messagesOf(t, "default", before)), lines(hist))
			}
			c.hist, c.thread, c.sent = h, th, len(h)
		case "edit":
			// Replace an earlier user message and go on from there.
			var users []int
			for i, m := range c.hist {
				if m.role == "user" {
					users = append(users, i)
				}
			}
			at := users[p.rng.IntN(len(users))]
			hist := append(append([]pmsg(nil), c.hist[:at]...), user(c, "edited"))
			h, th, _, err := p.exchange(c, hist, op, rng)
			fail(err)
			c.hist, c.thread = h, th
		case "regenerate", "rerun":
			// Ask again for the last reply (regenerate), or re-run the
			// whole prompt from an earlier user message.
			end := len(c.hist) - 1
			for end > 0 && c.hist[end].role != "user" {
				end--
			}
			if op == "rerun" {
				end = 0
			}
			h, th, _, err := p.exchange(c, c.hist[:end+1], op, rng)
			fail(err)
			c.hist, c.thread = h, th
		case "burst":
			// Concurrent divergent requests from one point.
			var wg sync.WaitGroup
			outs := make([][]pmsg, 5)
			ths := make([]string, 5)
			errs := make([]error, 5)
			for i := range 5 {
				hist := append(c.hist[:len(c.hist):len(c.hist)], user(c, fmt.Sprintf("burst %d", i)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					outs[i], ths[i], _, errs[i] = p.exchange(c, hist, op, rand.New(rand.NewPCG(seed, uint64(step*10+i))))
				}()
			}
			wg.Wait()
			for _, err := range errs {
				fail(err)
			}
			k := p.rng.IntN(5)
			c.hist, c.thread = outs[k], ths[k]
		case "delete":
			// DELETE the client's thread while its request is in flight.
			done := make(chan error, 1)
			hist := append(c.hist, user(c, "#hold"))
			var out []pmsg
			var th string
			go func() {
				var err error
				out, th, _, err = p.exchange(c, hist, op, rng)
				done <- err
			}()
			gate := <-p.holds
			p.mu.Lock()
			p.epochs[c.thread]++
			p.mu.Unlock()
			if s, _, b := p.r.do(t, "DELETE", "/api/threads/"+c.thread, "", ""); s != 204 {
				t.Fatalf("delete %s: %d %s", c.thread, s, b)
			}
			close(gate)
			fail(<-done)
			c.hist, c.thread = out, th
		}
	}
	// The oracle: every acknowledged conversation is, message for message,
	// a prefix of the log of the thread its answer named (unless that
	// thread was deleted since).
	checked := 0
	for _, a := range p.acks {
		if a.conv == nil || p.epochs[a.thread] != a.epoch {
			continue
		}
		var got []string
		for _, l := range summary(p.r.messagesOf(t, "default", a.thread)) {
			if !strings.HasPrefix(l, "system:") {
				got = append(got, strings.ReplaceAll(l, `{ "q" : "x" }`, `{"q":"x"}`))
			}
		}
		if len(got) < len(a.conv) || strings.Join(got[:len(a.conv)], "\n") != strings.Join(a.conv, "\n") {
			t.Errorf("%s acknowledged on %s, whose log does not begin with it:\nwant %q\n got %q", a.op, a.thread, a.conv, got)
			continue
		}
		checked++
	}
	// Append-mode clients: their log is their history, exactly.
	for _, c := range clients {
		if !c.append {
			continue
		}
		var got []string
		for _, l := range summary(p.r.messagesOf(t, "default", c.named)) {
			if !strings.HasPrefix(l, "system:") {
				got = append(got, strings.ReplaceAll(l, `{ "q" : "x" }`, `{"q":"x"}`))
			}
		}
		equalLines(t, fmt.Sprintf("append client %d", c.id), got, lines(c.hist))
	}
	if checked < 30 {
		t.Errorf("only %d of %d acknowledgements checked", checked, len(p.acks))
	}
	t.Logf("%d exchanges, %d checked against the log, %d threads", len(p.acks), checked, len(p.r.threadsOf(t)))
}
