package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/mcpserver"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store/dsn"
)

// callTool calls a tool and returns its structured result as JSON, or
// the error text with isErr set.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (out map[string]any, isErr bool, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError {
		return nil, true, text
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	return out, false, text
}

// checkMCP runs the client side of the MCP tests on a session: as the
// owner (tenant A) it lists the tools, searches, reads, remembers and
// recalls, lists threads and summarises the thread; as another tenant it
// must see nothing of A.
func checkMCP(t *testing.T, cs *mcp.ClientSession, owner bool, thread string, ref *string) {
	t.Helper()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	want := []string{"list_threads", "read", "recall_memory", "remember", "search", "thread_summary"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}

	out, isErr, text := callTool(t, cs, mcpserver.ToolSearch, map[string]any{"query": "checkout-failure-2026-03-15"})
	hits, _ := out["hits"].([]any)
	switch {
	case isErr:
		t.Fatalf("search failed: %s", text)
	case owner && len(hits) == 0:
		t.Fatal("the owner's search found nothing")
	case !owner && len(hits) != 0:
		t.Fatalf("another tenant's search found %v", hits)
	}
	if owner {
		h := hits[0].(map[string]any)
		*ref = h["ref"].(string)
		if h["thread"] != thread {
			t.Errorf("hit thread %v, want %s", h["thread"], thread)
		}
	}

	out, isErr, text = callTool(t, cs, mcpserver.ToolRead, map[string]any{"ref": *ref, "limit": 400})
	if owner && (isErr || !strings.Contains(fmt.Sprint(out["text"]), "checkout-failure-2026-03-15")) {
		t.Errorf("read: %v %s", out, text)
	}
	if !owner && (!isErr || strings.Contains(text, "checkout")) {
		t.Errorf("another tenant read the owner's ref: %v %s", out, text)
	}

	out, _, _ = callTool(t, cs, mcpserver.ToolRecallMemory, map[string]any{"query": "helix"})
	if items, _ := out["items"].([]any); len(items) != 0 {
		t.Errorf("memory before remember: %v", items)
	}
	if owner {
		if _, isErr, text := callTool(t, cs, mcpserver.ToolRemember, map[string]any{"namespace": []string{"prefs"}, "key": "editor", "value": "the user edits with helix"}); isErr {
			t.Fatalf("remember: %s", text)
		}
		out, _, _ = callTool(t, cs, mcpserver.ToolRecallMemory, map[string]any{"query": "helix"})
		if items, _ := out["items"].([]any); len(items) != 1 {
			t.Errorf("recall after remember: %v", out)
		}
	}

	out, _, _ = callTool(t, cs, mcpserver.ToolListThreads, nil)
	threads, _ := out["threads"].([]any)
	if owner && (len(threads) != 1 || threads[0].(map[string]any)["id"] != thread) {
		t.Errorf("owner's threads: %v", threads)
	}
	if !owner && len(threads) != 0 {
		t.Errorf("another tenant lists %v", threads)
	}

	out, isErr, text = callTool(t, cs, mcpserver.ToolThreadSummary, map[string]any{"thread": thread})
	if owner {
		obs, _ := out["observations"].([]any)
		if isErr || len(obs) == 0 {
			t.Errorf("thread_summary: %v %s", out, text)
		}
	} else if !isErr || !strings.Contains(text, "not found") {
		t.Errorf("another tenant's thread_summary: %v %s", out, text)
	}
}

// bearer adds a Mneme key to every request of the MCP client.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPOverHTTP: the go-sdk client on /mcp (streamable HTTP) as two
// tenants.
func TestMCPOverHTTP(t *testing.T) {
	h := startObs(t, obsOpts{keys: map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"}})
	h.session(t, "key-a", "mcp-thread", 12)
	connect := func(key string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("connect as %s: %v", key, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	var ref string
	checkMCP(t, connect("key-a"), true, "mcp-thread", &ref)
	checkMCP(t, connect("key-b"), false, "mcp-thread", &ref)

	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	if _, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", MaxRetries: -1}, nil); err == nil {
		t.Error("connected to /mcp without a key")
	}
}

// TestMCPOverStdio builds the mneme binary and talks to `mneme mcp` over
// stdio (the go-sdk's CommandTransport), once per tenant.
func TestMCPOverStdio(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mneme")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/mneme").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbPath := "sqlite:" + filepath.Join(dir, "mneme.db")
	seedThread(t, dbPath, "tenant-a", "stdio-thread")

	connect := func(tenant string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(bin, "mcp", "--store", dbPath, "--tenant", tenant)}, nil)
		if err != nil {
			t.Fatalf("connect as %s: %v", tenant, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	var ref string
	checkMCP(t, connect("tenant-a"), true, "stdio-thread", &ref)
	checkMCP(t, connect("tenant-b"), false, "stdio-thread", &ref)
}

// seedThread writes a long session into the store with the engine (small
// budget, so it compacts), as `mneme serve` would have.
func seedThread(t *testing.T, dsnStr, tenant, thread string) {
	t.Helper()
	ctx := context.Background()
	st, err := dsn.Open(ctx, dsnStr)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pol := testPolicy(8000)
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := m.Thread(tenant, thread)
	compactions := 0
	for i := 0; i < 20; i++ {
		text := strings.Repeat(fmt.Sprintf("step %d of INV-4401: reading src/shop/file_%d.go line by line. ", i, i), 20)
		if i == 2 {
			text = "trace_id=checkout-failure-2026-03-15 total=4400 want=4401\n" + text
		}
		_, w, err := th.AppendWindow(ctx, []message.Message{message.NewText(message.User, text), message.NewText(message.Assistant, fmt.Sprintf("ok %d", i))}, mneme.WindowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if w.Usage.Step {
			compactions++
		}
	}
	if compactions == 0 {
		t.Fatal("the seeded thread never compacted: thread_summary would have nothing to show")
	}
}
