package server_test

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/bits"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/mcpserver"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
)

// secret is the payload tenant A writes everywhere; tenant B must never
// see it, nor anything that tells A's data exists.
const secret = "zebra-quasar-7731"

// driveSession runs a resend session through the proxy as key on thread:
// each step a user message, a tool call and its large result (with the
// secret at step 2), so that the thread compacts and has observations.
func driveSession(t *testing.T, r *rig, key, thread string, steps int) {
	t.Helper()
	type msg = map[string]any
	history := []msg{
		{"role": "system", "content": "You are a coding agent."},
		{"role": "user", "content": "Fix INV-4401 in src/shop/checkout.go."},
	}
	for i := 0; i < steps; i++ {
		var body strings.Builder
		for l := 0; l < 50; l++ {
			fmt.Fprintf(&body, "src/shop/file_%d.go:%d: func handler%d_%d() { serve(%d) }\n", i, l, i, l, l)
		}
		if i == 2 {
			body.WriteString("trace_id=" + secret + " total=4400\n")
		}
		id := fmt.Sprintf("call_%d", i)
		if i > 0 {
			history = append(history, msg{"role": "user", "content": fmt.Sprintf("Step %d: go on.", i)})
		}
		history = append(history,
			msg{"role": "assistant", "content": nil, "tool_calls": []msg{{"id": id, "type": "function", "function": msg{"name": "read_file", "arguments": fmt.Sprintf(`{"path":"file_%d.go"}`, i)}}}},
			msg{"role": "tool", "tool_call_id": id, "content": body.String()},
		)
		b, _ := json.Marshal(msg{"model": "gpt-4o-mini", "messages": history})
		status, _, rb := r.do(t, "POST", "/v1/chat/completions", key, string(b), proxy.HeaderThread, thread)
		if status != http.StatusOK {
			t.Fatalf("step %d: %d %s", i, status, rb)
		}
		history = append(history, msg{"role": "assistant", "content": replyText(rb)})
	}
}

// TestIsolationMatrix (I8), on SQLite and PostgreSQL: tenant B, through
// every API route, MCP tool, recall tool and the proxy, cannot read,
// search, recall, list, export, delete or infer the existence of tenant
// A's threads and memories. For each object of A it asks about, it gets
// the same status and body as for an object that does not exist, and the
// store does the same work (same calls, same outcomes): the same timing
// class.
func TestIsolationMatrix(t *testing.T) {
	for _, backend := range backendsUnderTest {
		t.Run(backend, func(t *testing.T) { isolationMatrix(t, backend) })
	}
}

func isolationMatrix(t *testing.T, backend string) {
	var counter *countingStore
	r := startRig(t, rigOpts{
		backend:  backend,
		keys:     map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"},
		budget:   8000,
		embedder: true,
		wrap:     func(st store.Store) store.Store { counter = newCountingStore(st); return counter },
	})
	ctx := context.Background()
	driveSession(t, r, "key-a", "secret-thread", 10)
	if status, _, b := r.do(t, "PUT", "/api/memory/item?ns=team&key=db", "key-a", `{"value":{"host":"db.internal `+secret+`"}}`); status != 200 {
		t.Fatalf("A's memory: %d %s", status, b)
	}
	if err := r.m.FlushIndex(ctx); err != nil {
		t.Fatal(err)
	}
	// A sees its own data: the matrix below would prove nothing otherwise.
	status, _, b := r.do(t, "GET", "/api/search?q="+secret, "key-a", "")
	var sr struct {
		Hits []store.Hit `json:"hits"`
	}
	if status != 200 || json.Unmarshal(b, &sr) != nil || len(sr.Hits) == 0 {
		t.Fatalf("A cannot find its own secret: %d %s", status, b)
	}
	aRef := sr.Hits[0].Ref
	if _, _, b := r.do(t, "GET", "/api/threads/secret-thread/events", "key-a", ""); !strings.Contains(string(b), `"observations":[{`) {
		t.Fatalf("A's thread has no observations: %.300s", b)
	}
	missingRef := store.NewRef()

	t.Run("api pairs", func(t *testing.T) {
		// Each request is made by B about A's object and about a missing
		// one: same status, same body, same store work.
		type pair struct{ method, mine, missing, body string }
		var pairs []pair
		for _, p := range []string{"", "/window", "/events", "/usage", "/export", "/policy"} {
			pairs = append(pairs, pair{"GET", "/api/threads/secret-thread" + p, "/api/threads/no-such-thread" + p, ""})
		}
		pairs = append(pairs,
			pair{"PUT", "/api/threads/secret-thread/policy", "/api/threads/no-such-thread/policy", `{"min_tail_turns":2}`},
			pair{"POST", "/api/threads/secret-thread/compact", "/api/threads/no-such-thread/compact", ""},
			pair{"DELETE", "/api/threads/secret-thread", "/api/threads/no-such-thread", ""},
			pair{"GET", "/api/read/" + aRef, "/api/read/" + missingRef, ""},
			pair{"GET", "/api/read/" + aRef + "?offset=10&limit=100", "/api/read/" + missingRef + "?offset=10&limit=100", ""},
			pair{"GET", "/api/search?q=" + secret + "&thread=secret-thread", "/api/search?q=" + secret + "&thread=no-such-thread", ""},
			pair{"GET", "/api/search?q=" + secret, "/api/search?q=never-written-anywhere-0042", ""},
			pair{"GET", "/api/memory/item?ns=team&key=db", "/api/memory/item?ns=team&key=nokey", ""},
			pair{"DELETE", "/api/memory/item?ns=team&key=db", "/api/memory/item?ns=team&key=nokey", ""},
			pair{"DELETE", "/api/memory?ns=team", "/api/memory?ns=noteam", ""},
			pair{"GET", "/api/memory?ns=team", "/api/memory?ns=noteam", ""},
			pair{"GET", "/api/memory?q=" + secret, "/api/memory?q=never-written-anywhere-0042", ""},
			pair{"GET", "/api/threads?q=secret", "/api/threads?q=nosuch", ""},
		)
		for _, p := range pairs {
			counter.take()
			s1, _, b1 := r.do(t, p.method, p.mine, "key-b", p.body)
			w1 := counter.take()
			s2, _, b2 := r.do(t, p.method, p.missing, "key-b", p.body)
			w2 := counter.take()
			b1s := strings.ReplaceAll(string(b1), aRef, "REF")
			b2s := strings.ReplaceAll(string(b2), missingRef, "REF")
			if s1 != s2 || b1s != b2s {
				t.Errorf("%s %s as B: %d %s; for a missing object: %d %s", p.method, p.mine, s1, b1, s2, b2)
			}
			if w1 != w2 {
				t.Errorf("%s %s as B: store work %q; for a missing object %q", p.method, p.mine, w1, w2)
			}
			if strings.Contains(string(b1), secret) || strings.Contains(string(b1), "INV-4401") {
				t.Errorf("%s %s as B shows A's data: %s", p.method, p.mine, b1)
			}
		}
	})

	t.Run("api listings", func(t *testing.T) {
		for _, c := range []struct{ path, want string }{
			{"/api/threads", `{"threads":[]}`},
			{"/api/search?q=INV-4401", `{"hits":[]}`},
			{"/api/search?q=checkout", `{"hits":[]}`},
			{"/api/memory", `{"items":[]}`},
			{"/api/memory?q=db.internal", `{"items":[]}`},
		} {
			status, _, b := r.do(t, "GET", c.path, "key-b", "")
			if status != 200 || strings.TrimSpace(string(b)) != c.want {
				t.Errorf("GET %s as B: %d %s, want %s", c.path, status, b, c.want)
			}
		}
	})

	t.Run("mcp tools", func(t *testing.T) {
		cs := mcpConnect(t, r.url, "key-b")
		pairs := []struct {
			tool          string
			mine, missing map[string]any
		}{
			{mcpserver.ToolSearch, map[string]any{"query": secret}, map[string]any{"query": "never-written-anywhere-0042"}},
			{mcpserver.ToolSearch, map[string]any{"query": "INV-4401", "thread": "secret-thread"}, map[string]any{"query": "INV-4401", "thread": "no-such-thread"}},
			{mcpserver.ToolRead, map[string]any{"ref": aRef}, map[string]any{"ref": missingRef}},
			{mcpserver.ToolRecallMemory, map[string]any{"query": secret}, map[string]any{"query": "never-written-anywhere-0042"}},
			{mcpserver.ToolRecallMemory, map[string]any{"namespace": []string{"team"}}, map[string]any{"namespace": []string{"noteam"}}},
			{mcpserver.ToolThreadSummary, map[string]any{"thread": "secret-thread"}, map[string]any{"thread": "no-such-thread"}},
			{mcpserver.ToolListThreads, nil, nil},
		}
		for _, p := range pairs {
			counter.take()
			o1, e1, t1 := callTool(t, cs, p.tool, p.mine)
			w1 := counter.take()
			o2, e2, t2 := callTool(t, cs, p.tool, p.missing)
			w2 := counter.take()
			j1, _ := json.Marshal(o1)
			j2, _ := json.Marshal(o2)
			if e1 != e2 || t1 != t2 && !(strings.Contains(t1, aRef) || strings.Contains(t1, "no results")) || string(j1) != string(j2) {
				t.Errorf("MCP %s as B: %v %s %s; missing: %v %s %s", p.tool, e1, t1, j1, e2, t2, j2)
			}
			if w1 != w2 {
				t.Errorf("MCP %s as B: store work %q; missing %q", p.tool, w1, w2)
			}
			if strings.Contains(t1+string(j1), secret) || strings.Contains(t1+string(j1), "secret-thread") {
				t.Errorf("MCP %s as B shows A's data: %s %s", p.tool, t1, j1)
			}
		}
		// B's remember lands in B's memory only.
		if _, isErr, text := callTool(t, cs, mcpserver.ToolRemember, map[string]any{"namespace": []string{"b-notes"}, "key": "db", "value": "b's own"}); isErr {
			t.Fatalf("B's remember: %s", text)
		}
		it, err := r.st.GetMemory(ctx, "tenant-a", []string{"team"}, "db")
		if err != nil || !strings.Contains(string(it.Value), secret) {
			t.Errorf("B's remember touched A's item: %v %s", err, it.Value)
		}
	})

	t.Run("recall handler", func(t *testing.T) {
		h := r.m.RecallHandler()
		for _, sc := range []recall.Scope{{Tenant: "tenant-b", Thread: "secret-thread"}, {Tenant: "tenant-b", AllThreads: true}} {
			call := func(name, args string) (string, string) {
				counter.take()
				text, _ := h.Call(ctx, sc, name, args)
				return text, counter.take()
			}
			pairs := []struct{ name, mine, missing string }{
				{recall.ToolSearch, `{"query":"` + secret + `"}`, `{"query":"never-written-anywhere-0042"}`},
				{recall.ToolRead, `{"ref":"` + aRef + `"}`, `{"ref":"` + missingRef + `"}`},
				{recall.ToolRecallMemory, `{"query":"` + secret + `"}`, `{"query":"never-written-anywhere-0042"}`},
				{recall.ToolRecallMemory, `{"namespace":["team"],"query":"db"}`, `{"namespace":["noteam"],"query":"db"}`},
			}
			for _, p := range pairs {
				t1, w1 := call(p.name, p.mine)
				t2, w2 := call(p.name, p.missing)
				t1 = strings.NewReplacer(aRef, "REF", secret, "Q").Replace(t1)
				t2 = strings.NewReplacer(missingRef, "REF", "never-written-anywhere-0042", "Q").Replace(t2)
				if t1 != t2 || w1 != w2 {
					t.Errorf("%s %+v as B: %q (%s); missing: %q (%s)", p.name, sc, t1, w1, t2, w2)
				}
			}
			if text, _ := h.Call(ctx, sc, recall.ToolRemember, `{"namespace":["b-notes"],"key":"db2","value":"b"}`); strings.HasPrefix(text, "error") {
				t.Errorf("B's remember: %s", text)
			}
			if _, err := r.st.GetMemory(ctx, "tenant-a", []string{"b-notes"}, "db2"); err == nil {
				t.Error("B's mneme_remember wrote into A's memory")
			}
		}
	})

	t.Run("recall through the proxy", func(t *testing.T) {
		// B's model calls mneme_read with A's ref, then with a missing one,
		// and mneme_search for A's secret: the proxy answers from B's
		// scope, and what it gives the model is the same for both refs.
		answers := map[string]string{}
		for _, c := range []struct{ name, args string }{
			{recall.ToolRead, `{"ref":"` + aRef + `"}`},
			{recall.ToolRead, `{"ref":"` + missingRef + `"}`},
			{recall.ToolSearch, `{"query":"` + secret + `"}`},
		} {
			r.llm.Reset()
			r.llm.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "rc1", Name: c.name, Arguments: c.args}}}, fakellm.Reply{Text: "done"})
			status, _, b := r.do(t, "POST", "/v1/chat/completions", "key-b", chatBody("user", "look it up"), proxy.HeaderThread, "b-recall")
			if status != 200 || strings.Contains(string(b), secret) {
				t.Fatalf("B's recall round: %d %s", status, b)
			}
			var reqs []fakellm.Recorded
			for _, rq := range r.llm.Requests() {
				if rq.Path == "/v1/chat/completions" {
					reqs = append(reqs, rq)
				}
			}
			if len(reqs) < 2 {
				t.Fatalf("the proxy did not answer the recall call: %d upstream requests", len(reqs))
			}
			result := lastToolResult(t, reqs[len(reqs)-1].Body)
			if strings.Contains(result, "INV-4401") || strings.Contains(result, "total=4400") {
				t.Errorf("%s %s as B gave B's model A's data: %s", c.name, c.args, result)
			}
			answers[c.args] = strings.ReplaceAll(strings.ReplaceAll(result, aRef, "REF"), missingRef, "REF")
		}
		if a, m := answers[`{"ref":"`+aRef+`"}`], answers[`{"ref":"`+missingRef+`"}`]; a != m || a == "" {
			t.Errorf("mneme_read through the proxy: A's ref %q, a missing ref %q", a, m)
		}
		if s := answers[`{"query":"`+secret+`"}`]; !strings.HasPrefix(s, "no results") {
			t.Errorf("mneme_search as B: %q", s)
		}
	})

	t.Run("proxy thread derivation", func(t *testing.T) {
		// The same first messages from A and B: different threads.
		body := chatBody("system", "You are a coding agent.", "user", "Derive me a thread.")
		_, ha, _ := r.do(t, "POST", "/v1/chat/completions", "key-a", body)
		_, hb, _ := r.do(t, "POST", "/v1/chat/completions", "key-b", body)
		if ha.Get(proxy.HeaderThread) == hb.Get(proxy.HeaderThread) {
			t.Errorf("A and B derived the same thread id %s", ha.Get(proxy.HeaderThread))
		}
		// B naming A's thread continues a thread of its own: the answer is
		// that of a fresh thread and the model sees nothing of A's.
		r.llm.Reset()
		next := chatBody("user", "Continue where we left off.")
		_, h1, _ := r.do(t, "POST", "/v1/chat/completions", "key-b", next, proxy.HeaderThread, "secret-thread-2-copy")
		_, h2, _ := r.do(t, "POST", "/v1/chat/completions", "key-b", next, proxy.HeaderThread, "secret-thread")
		for _, k := range []string{proxy.HeaderWindow, proxy.HeaderThreadTok, proxy.HeaderCompacted, proxy.HeaderForkedFrom} {
			if h1.Get(k) != h2.Get(k) {
				t.Errorf("%s: a fresh thread %q, A's thread id %q", k, h1.Get(k), h2.Get(k))
			}
		}
		for _, req := range r.llm.Requests() {
			if req.Path == "/v1/chat/completions" && strings.Contains(string(req.Body), "INV-4401") || strings.Contains(string(req.Body), secret) {
				t.Errorf("B's request to the model carries A's thread: %.300s", req.Body)
			}
		}
		msgs, err := r.m.Thread("tenant-a", "secret-thread").Messages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if strings.Contains(m.TextOf(), "look it up") || strings.Contains(m.TextOf(), "Continue where we left off") {
				t.Fatalf("B's message landed in A's thread: %s", m.TextOf())
			}
		}
	})

	// After all of B's attempts (deletes included), A still has everything.
	if status, _, b := r.do(t, "GET", "/api/search?q="+secret, "key-a", ""); status != 200 || !strings.Contains(string(b), aRef) {
		t.Errorf("A's search after B's attempts: %d %s", status, b)
	}
	if it, err := r.st.GetMemory(ctx, "tenant-a", []string{"team"}, "db"); err != nil || !strings.Contains(string(it.Value), secret) {
		t.Errorf("A's memory after B's attempts: %v", err)
	}
}

// lastToolResult returns the text of the last tool message of an OpenAI
// request body.
func lastToolResult(t *testing.T, body []byte) string {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "tool" {
			var s string
			if json.Unmarshal(req.Messages[i].Content, &s) == nil {
				return s
			}
			var parts []struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(req.Messages[i].Content, &parts); err != nil {
				t.Fatalf("tool content %s: %v", req.Messages[i].Content, err)
			}
			for _, p := range parts {
				s += p.Text
			}
			return s
		}
	}
	return ""
}

func mcpConnect(t *testing.T, base, key string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestRefsUnguessable: refs look random, not sequential (SQLite's are
// locators under a keyed permutation, docs/security.md): no structure
// between consecutive messages, and a ref one step from a real one names
// nothing.
func TestRefsUnguessable(t *testing.T) {
	r := startRig(t, rigOpts{backend: "sqlite"})
	for i := 0; i < 40; i++ {
		if status, _, b := r.do(t, "POST", "/v1/chat/completions", "", chatBody("user", fmt.Sprintf("message %d", i)), proxy.HeaderThread, "refs", proxy.HeaderMode, proxy.ModeAppend); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	evs, err := r.st.Load(context.Background(), "default", "refs", 1, 0)
	if err != nil || len(evs) < 80 {
		t.Fatalf("%d events: %v", len(evs), err)
	}
	seen := map[string]bool{}
	var prev []byte
	totalBits, pairs := 0, 0
	for _, ev := range evs {
		if ev.Ref == "" {
			continue
		}
		raw, err := hex.DecodeString(strings.TrimPrefix(ev.Ref, "m_"))
		if !strings.HasPrefix(ev.Ref, "m_") || err != nil || len(raw) != 12 {
			t.Fatalf("ref %q is not m_ and 24 hex digits", ev.Ref)
		}
		if seen[ev.Ref] {
			t.Fatalf("ref %s twice", ev.Ref)
		}
		seen[ev.Ref] = true
		if prev != nil {
			for i := range raw {
				totalBits += bits.OnesCount8(raw[i] ^ prev[i])
			}
			pairs++
		}
		prev = raw
	}
	// Consecutive random 96-bit refs differ in 48 bits on average; a
	// counter or a timestamp would differ in a handful.
	if mean := float64(totalBits) / float64(pairs); mean < 40 || mean > 56 {
		t.Errorf("consecutive refs differ in %.1f bits on average, want about 48", mean)
	}
	// The refs tested are the store's own (the engine takes them from it,
	// store.RefMaker), kept in made_ref.
	db, err := sql.Open("sqlite", "file:"+r.sqlite+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var made, all int
	if err := db.QueryRow(`SELECT count(made_ref), count(*) FROM events WHERE thread = 'refs' AND kind = 'message'`).Scan(&made, &all); err != nil {
		t.Fatal(err)
	}
	if made != len(seen) || all != len(seen) {
		t.Errorf("%d of %d messages have store-made refs, want all %d", made, all, len(seen))
	}
	last := evs[len(evs)-1].Ref
	b, _ := hex.DecodeString(last[2:])
	b[11]++
	near := "m_" + hex.EncodeToString(b)
	if status, _, body := r.do(t, "GET", "/api/read/"+url.PathEscape(near), "", ""); status != http.StatusNotFound {
		t.Errorf("the ref next to a real one: %d %s", status, body)
	}
	_ = time.Now
}

// TestScoresIgnoreOtherTenants: what A's search returns (hits and their
// scores, through the API and MCP, archive and memory) does not move when
// B writes documents with the same terms. SQLite's FTS5 keeps its BM25
// statistics per file, so raw scores would move; with rank scores, the
// hits and the scores stay. On SQLite the order of A's hits can still move
// (the average document length is the file's): a weakness docs/security.md
// states, checked here as "same hits, same scores, any order"; on
// PostgreSQL (ts_rank reads one document at a time) nothing moves.
func TestScoresIgnoreOtherTenants(t *testing.T) {
	for _, backend := range backendsUnderTest {
		t.Run(backend, func(t *testing.T) {
			r := startRig(t, rigOpts{backend: backend, keys: map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"}})
			for i, text := range []string{"alpha beta gamma", "alpha alpha delta", "epsilon alpha", "alpha"} {
				if status, _, b := r.do(t, "POST", "/v1/chat/completions", "key-a", chatBody("user", text), proxy.HeaderThread, fmt.Sprintf("a-%d", i)); status != 200 {
					t.Fatalf("%d %s", status, b)
				}
				r.do(t, "PUT", fmt.Sprintf("/api/memory/item?ns=n&key=k%d", i), "key-a", fmt.Sprintf(`{"value":%q}`, text))
			}
			cs := mcpConnect(t, r.url, "key-a")
			look := func() string {
				_, _, b1 := r.do(t, "GET", "/api/search?q=alpha", "key-a", "")
				_, _, b2 := r.do(t, "GET", "/api/memory?q=alpha", "key-a", "")
				o, _, _ := callTool(t, cs, mcpserver.ToolSearch, map[string]any{"query": "alpha"})
				j, _ := json.Marshal(o)
				return string(b1) + string(b2) + string(j)
			}
			before := look()
			if !strings.Contains(before, `"score":0.5`) {
				t.Fatalf("A's searches found too little: %s", before)
			}
			for i := 0; i < 30; i++ {
				r.do(t, "POST", "/v1/chat/completions", "key-b", chatBody("user", strings.Repeat("alpha ", i+1)), proxy.HeaderThread, fmt.Sprintf("b-%d", i))
				r.do(t, "PUT", fmt.Sprintf("/api/memory/item?ns=n&key=k%d", i), "key-b", `{"value":"alpha alpha"}`)
			}
			after := look()
			if backend == "sqlite" {
				before, after = orderless(t, before), orderless(t, after)
			}
			if after != before {
				t.Errorf("A's results moved when B wrote:\n%s\n%s", before, after)
			}
		})
	}
}

// orderless rewrites look's output as its sorted refs, keys and scores.
func orderless(t *testing.T, s string) string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '{' || r == '}' || r == ',' }) {
		if strings.HasPrefix(f, `"ref"`) || strings.HasPrefix(f, `"key"`) || strings.HasPrefix(f, `"score"`) {
			out = append(out, f)
		}
	}
	if len(out) < 8 {
		t.Fatalf("nothing to compare in %s", s)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
