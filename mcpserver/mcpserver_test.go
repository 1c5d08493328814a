package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/mcpserver"
	"github.com/mnemehq/mneme/message"

	_ "github.com/mnemehq/mneme/store/inmem"
)

// session connects an MCP client to the tools of tenant over an in-memory
// transport (the SDK's own pair), so the tools are exercised through the
// protocol as a client sees them, without the HTTP server around them.
func session(t *testing.T, m *mneme.Engine, tenant string) *mcp.ClientSession {
	t.Helper()
	s, err := mcpserver.New(mcpserver.Config{Engine: m}, tenant)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and decodes its structured result into out; it
// returns the error text when the tool answered an error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return text
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	return ""
}

type hits struct {
	Hits []struct {
		Thread string `json:"thread"`
		Ref    string `json:"ref"`
		Seq    int64  `json:"seq"`
	} `json:"hits"`
}

type items struct {
	Items []mcpserver.MemoryItem `json:"items"`
}

// TestTools: the six tools as a client calls them, for the tenant a
// server was made for, and nothing of that tenant for another (I8).
func TestTools(t *testing.T) {
	ctx := context.Background()
	m, err := mneme.Open(ctx, mneme.Config{DSN: "memory:"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const fact = "the deploy failed on INV-4401 because the checkout token expired"
	if _, err := m.Thread("acme", "run-1").Append(ctx,
		message.NewText(message.User, "why did the deploy fail?"),
		message.NewText(message.Assistant, fact)); err != nil {
		t.Fatal(err)
	}

	a := session(t, m, "acme")
	tools, err := a.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	want := []string{mcpserver.ToolListThreads, mcpserver.ToolRead, mcpserver.ToolRecallMemory, mcpserver.ToolRemember, mcpserver.ToolSearch, mcpserver.ToolThreadSummary}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	var h hits
	if e := call(t, a, mcpserver.ToolSearch, map[string]any{"query": "INV-4401 token"}, &h); e != "" {
		t.Fatalf("search: %s", e)
	}
	if len(h.Hits) != 1 || h.Hits[0].Thread != "run-1" || h.Hits[0].Seq != 2 || h.Hits[0].Ref == "" {
		t.Fatalf("search hits %+v, want the assistant's message (seq 2) of run-1", h.Hits)
	}
	ref := h.Hits[0].Ref
	var page map[string]any
	if e := call(t, a, mcpserver.ToolRead, map[string]any{"ref": ref}, &page); e != "" {
		t.Fatalf("read: %s", e)
	}
	if b, _ := json.Marshal(page); !strings.Contains(string(b), "checkout token expired") {
		t.Fatalf("read %s: the message's text is not in the page", b)
	}
	if e := call(t, a, mcpserver.ToolRead, map[string]any{"ref": "m_notaref"}, &page); e == "" {
		t.Fatal("read of a ref that does not exist answered no error")
	}
	if e := call(t, a, mcpserver.ToolSearch, map[string]any{"query": "  "}, &h); !strings.Contains(e, "query") {
		t.Fatalf("search with an empty query: error %q, want one that names the query", e)
	}

	var it mcpserver.MemoryItem
	if e := call(t, a, mcpserver.ToolRemember, map[string]any{"namespace": []string{"user", "prefs"}, "key": "editor", "value": "prefers vim keybindings"}, &it); e != "" {
		t.Fatalf("remember: %s", e)
	}
	var got items
	if e := call(t, a, mcpserver.ToolRecallMemory, map[string]any{"query": "vim"}, &got); e != "" {
		t.Fatalf("recall_memory: %s", e)
	}
	if len(got.Items) != 1 || got.Items[0].Key != "editor" || !slices.Equal(got.Items[0].Namespace, []string{"user", "prefs"}) {
		t.Fatalf("recall_memory %+v, want the remembered item", got.Items)
	}
	var threads struct {
		Threads []struct {
			ID string `json:"id"`
		} `json:"threads"`
	}
	if e := call(t, a, mcpserver.ToolListThreads, map[string]any{}, &threads); e != "" {
		t.Fatalf("list_threads: %s", e)
	}
	if len(threads.Threads) != 1 {
		t.Fatalf("list_threads %+v, want run-1 alone", threads)
	}
	var sum mcpserver.ThreadSummary
	if e := call(t, a, mcpserver.ToolThreadSummary, map[string]any{"thread": "run-1"}, &sum); e != "" {
		t.Fatalf("thread_summary: %s", e)
	}
	if sum.Forms["raw"] != 2 {
		t.Fatalf("thread_summary forms %v, want 2 raw messages", sum.Forms)
	}

	// Another tenant sees none of it.
	b := session(t, m, "other")
	if e := call(t, b, mcpserver.ToolSearch, map[string]any{"query": "INV-4401 token"}, &h); e != "" || len(h.Hits) != 0 {
		t.Fatalf("another tenant's search: %+v %q", h.Hits, e)
	}
	if e := call(t, b, mcpserver.ToolRead, map[string]any{"ref": ref}, &page); e == "" {
		t.Fatal("another tenant read acme's message by its ref")
	}
	if e := call(t, b, mcpserver.ToolRecallMemory, map[string]any{"query": "vim"}, &got); e != "" || len(got.Items) != 0 {
		t.Fatalf("another tenant's recall_memory: %+v %q", got.Items, e)
	}
	if e := call(t, b, mcpserver.ToolThreadSummary, map[string]any{"thread": "run-1"}, &sum); e == "" {
		t.Fatal("another tenant got acme's thread summary")
	}
}

// TestHandlerAnswersJSONRPCErrors: what the transport refuses itself
// comes as a JSON-RPC error object, with the HTTP status kept.
func TestHandlerAnswersJSONRPCErrors(t *testing.T) {
	ctx := context.Background()
	m, err := mneme.Open(ctx, mneme.Config{DSN: "memory:"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h, err := mcpserver.Handler(mcpserver.Config{Engine: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		name, body string
		code       int
	}{
		{"not JSON", `{"jsonrpc":`, -32700},
		{"not a request", `[]`, -32600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Fatalf("status %d, want a 4xx", resp.StatusCode)
			}
			var out struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if out.JSONRPC != "2.0" || out.Error.Code != tc.code || out.Error.Message == "" {
				t.Fatalf("answer %+v, want a JSON-RPC error %d", out, tc.code)
			}
		})
	}
}
