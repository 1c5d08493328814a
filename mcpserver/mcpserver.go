// Package mcpserver exposes a tenant's Mneme archive and long-term memory to
// MCP clients (Claude Code, Cursor, any client of the Model Context
// Protocol) with the official go-sdk: the tools search, read, remember,
// recall_memory, list_threads and thread_summary, over stdio (`mneme mcp`)
// and over streamable HTTP (/mcp on `mneme serve`).
//
// Every tool acts for one tenant: the one `mneme mcp --tenant` names, or
// the one the server's auth maps the request's key to. Over HTTP the
// server runs stateless, so each request is checked for its own key and a
// session id never carries one tenant's rights to another key (I8).
//
// The package must not import the proxy, a store backend or SQL.
package mcpserver

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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/memory"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/tenant"
	"github.com/mnemehq/mneme/window"
)

// Version is what the server reports as its implementation version.
const Version = "0.1.0"

// The tools' names.
const (
	ToolSearch        = "search"
	ToolRead          = "read"
	ToolRemember      = "remember"
	ToolRecallMemory  = "recall_memory"
	ToolListThreads   = "list_threads"
	ToolThreadSummary = "thread_summary"
)

// Config is what the tools read and write through.
type Config struct {
	// Engine is the engine; required.
	Engine *mneme.Engine
	// API computes thread summaries (observations); nil: one over Engine.
	API *api.API
	// Recall searches the archive; nil: BM25 over the Engine's store.
	Recall *recall.Recall
	// Memory is the long-term memory; nil: over the Engine's store.
	Memory *memory.Bank
}

// tools holds what every tenant's server shares.
type tools struct {
	m   *mneme.Engine
	st  store.Store
	a   *api.API
	rec *recall.Recall
	mem *memory.Bank
}

func newTools(cfg Config) (*tools, error) {
	if cfg.Engine == nil {
		return nil, errors.New("mcpserver: Config.Engine is required")
	}
	t := &tools{m: cfg.Engine, st: cfg.Engine.Store(), a: cfg.API, rec: cfg.Recall, mem: cfg.Memory}
	if t.a == nil {
		a, err := api.New(api.Config{Engine: cfg.Engine})
		if err != nil {
			return nil, err
		}
		t.a = a
	}
	if t.rec == nil {
		t.rec = &recall.Recall{Store: t.st}
	}
	if t.mem == nil {
		t.mem = memory.New(t.st, memory.Options{})
	}
	return t, nil
}

// New returns an MCP server whose tools act for tenant.
func New(cfg Config, tenant string) (*mcp.Server, error) {
	t, err := newTools(cfg)
	if err != nil {
		return nil, err
	}
	if tenant == "" {
		return nil, errors.New("mcpserver: empty tenant")
	}
	return t.server(tenant), nil
}

// ServeStdio serves the tools for tenant on stdin and stdout until the
// client disconnects or ctx ends.
func ServeStdio(ctx context.Context, cfg Config, tenant string) error {
	s, err := New(cfg, tenant)
	if err != nil {
		return err
	}
	return s.Run(ctx, &mcp.StdioTransport{})
}

// Handler serves MCP over streamable HTTP, stateless: each request's tenant
// is the one in its context (tenant.Of, set by the server's auth). Mount it
// behind the auth. Errors the transport answers itself (a body that is not
// JSON, a method it does not serve) come as JSON-RPC error objects, not as
// plain text, so that clients parse every answer the same way.
func Handler(cfg Config) (http.Handler, error) {
	t, err := newTools(cfg)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	servers := map[string]*mcp.Server{}
	get := func(r *http.Request) *mcp.Server {
		id := tenant.Of(r.Context())
		mu.Lock()
		defer mu.Unlock()
		s := servers[id]
		if s == nil {
			s = t.server(id)
			servers[id] = s
		}
		return s
	}
	return jsonRPCErrors(mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})), nil
}

// JSON-RPC 2.0 error codes.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeInternalError  = -32603
)

// maxBody bounds the body jsonRPCErrors reads to tell a parse error from
// another refusal.
const maxBody = 32 << 20

// jsonRPCErrors turns the transport's plain-text error answers into
// JSON-RPC error responses (id null, the same HTTP status): -32700 when the
// body is not JSON, -32600 for another refusal of the request, -32603 for
// a fault of the server.
func jsonRPCErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parseErr := false
		if r.Body != nil && r.Method == http.MethodPost {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			if err != nil {
				writeRPCError(w, http.StatusBadRequest, codeInvalidRequest, "could not read the request body")
				return
			}
			parseErr = !json.Valid(body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(&rpcErrorWriter{ResponseWriter: w, parseErr: parseErr}, r)
	})
}

// rpcErrorWriter rewrites an error answer whose body is not JSON.
type rpcErrorWriter struct {
	http.ResponseWriter
	parseErr  bool
	rewriting bool // the answer is an error being rewritten: drop its text
}

func (e *rpcErrorWriter) WriteHeader(code int) {
	ct := e.Header().Get("Content-Type")
	if code < 400 || strings.HasPrefix(ct, "application/json") {
		e.ResponseWriter.WriteHeader(code)
		return
	}
	e.rewriting = true
	rpc, msg := codeInvalidRequest, http.StatusText(code)
	switch {
	case e.parseErr:
		rpc, msg = codeParseError, "parse error: the body is not JSON"
	case code >= 500:
		rpc = codeInternalError
	}
	writeRPCError(e.ResponseWriter, code, rpc, msg)
}

func (e *rpcErrorWriter) Write(b []byte) (int, error) {
	if e.rewriting {
		return len(b), nil
	}
	return e.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes of
// the event stream).
func (e *rpcErrorWriter) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// WriteError answers with a JSON-RPC error object (id null) and HTTP
// status; the server uses it for the refusals it makes before MCP runs
// (auth, limits, bodies).
func WriteError(w http.ResponseWriter, status int, msg string) {
	code := codeInvalidRequest
	if status >= 500 {
		code = codeInternalError
	}
	writeRPCError(w, status, code, msg)
}

func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// ---- tools ------------------------------------------------------------

// SearchIn is the search tool's input.
type SearchIn struct {
	Query  string `json:"query" jsonschema:"words, ids, paths or error text to find"`
	Thread string `json:"thread,omitempty" jsonschema:"search only this thread (default: every thread)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"most results (default 10, at most 100)"`
}

// ReadIn is the read tool's input.
type ReadIn struct {
	Ref    string `json:"ref" jsonschema:"the message ref, e.g. m_0123abcd..."`
	Offset int    `json:"offset,omitempty" jsonschema:"first line (from 1), or first byte for a message read by bytes"`
	Limit  int    `json:"limit,omitempty" jsonschema:"lines (or bytes) to read"`
}

// RememberIn is the remember tool's input.
type RememberIn struct {
	Namespace []string `json:"namespace,omitempty" jsonschema:"namespace path, e.g. [\"user\", \"prefs\"] (default [\"memories\"])"`
	Key       string   `json:"key" jsonschema:"the item's key within its namespace"`
	Value     any      `json:"value" jsonschema:"the fact to keep: text or a JSON object"`
}

// RecallMemoryIn is the recall_memory tool's input.
type RecallMemoryIn struct {
	Query     string   `json:"query,omitempty" jsonschema:"what to look for (empty: the newest items)"`
	Namespace []string `json:"namespace,omitempty" jsonschema:"namespace prefix to search under (default: all)"`
	Limit     int      `json:"limit,omitempty" jsonschema:"most items (default 10)"`
}

// ListThreadsIn is the list_threads tool's input.
type ListThreadsIn struct {
	Cursor string `json:"cursor,omitempty" jsonschema:"the next cursor of a previous page"`
	Limit  int    `json:"limit,omitempty" jsonschema:"most threads (default 50)"`
}

// ThreadSummaryIn is the thread_summary tool's input.
type ThreadSummaryIn struct {
	Thread string `json:"thread" jsonschema:"the thread id"`
}

// MemoryItem is a long-term memory item as the tools return it.
type MemoryItem struct {
	Namespace []string `json:"namespace"`
	Key       string   `json:"key"`
	Value     any      `json:"value"`
	Updated   string   `json:"updated"`
	Score     float64  `json:"score,omitempty"`
}

// ThreadSummary is the thread_summary tool's output: the thread, its
// observations with the ranges they cover, and what the window holds.
type ThreadSummary struct {
	Thread       store.ThreadInfo `json:"thread"`
	Observations []window.Block   `json:"observations"`
	Forms        map[string]int   `json:"forms"`
}

func (t *tools) server(tenant string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mneme", Title: "Mneme: context and memory for LLM agents", Version: Version}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: ToolSearch, Description: "Full-text search of every conversation Mneme keeps for you (including what left the context window). Returns hits with their thread, seq and ref; read one whole with the read tool."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in SearchIn) (*mcp.CallToolResult, any, error) {
			if strings.TrimSpace(in.Query) == "" {
				return nil, nil, errors.New("query is required")
			}
			limit := in.Limit
			if limit <= 0 {
				limit = recall.DefaultLimit
			}
			hits, err := t.rec.Search(ctx, tenant, store.SearchQuery{Text: in.Query, Thread: in.Thread, Limit: min(limit, recall.MaxLimit)})
			if err != nil {
				return nil, nil, toolErr(err)
			}
			if hits == nil {
				hits = []store.Hit{}
			}
			return nil, map[string]any{"hits": api.RankScores(hits)}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolRead, Description: "Read a logged message by ref (as search results and placeholders name it), one page at a time: the page says where the next one starts."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in ReadIn) (*mcp.CallToolResult, any, error) {
			p, err := recall.Read(ctx, t.st, tenant, "", in.Ref, in.Offset, in.Limit)
			if err != nil {
				return nil, nil, toolErr(err)
			}
			return nil, p, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolRemember, Description: "Keep a fact in long-term memory, shared by all your threads, under a namespace and key (replacing what was there)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in RememberIn) (*mcp.CallToolResult, any, error) {
			ns := in.Namespace
			if len(ns) == 0 {
				ns = []string{"memories"}
			}
			v := in.Value
			if s, ok := v.(string); ok {
				v = map[string]any{"text": s}
			}
			raw, err := json.Marshal(v)
			if err != nil || v == nil {
				return nil, nil, errors.New("value must be text or a JSON object")
			}
			it, err := t.mem.Put(ctx, tenant, ns, in.Key, raw, 0)
			if err != nil {
				return nil, nil, toolErr(err)
			}
			return nil, itemOf(it), nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolRecallMemory, Description: "Search long-term memory (facts remembered from any thread), best first; with no query, the newest items."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in RecallMemoryIn) (*mcp.CallToolResult, any, error) {
			items, err := t.mem.Search(ctx, tenant, in.Namespace, in.Query, nil, in.Limit)
			if err != nil {
				return nil, nil, toolErr(err)
			}
			out := []MemoryItem{}
			for _, it := range api.RankItemScores(items) {
				out = append(out, itemOf(it))
			}
			return nil, map[string]any{"items": out}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolListThreads, Description: "List your threads, most recently updated first, with their message and token counts."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in ListThreadsIn) (*mcp.CallToolResult, any, error) {
			limit := in.Limit
			if limit <= 0 || limit > 500 {
				limit = 50
			}
			infos, next, err := t.st.Threads(ctx, tenant, store.Page{Cursor: in.Cursor, Limit: limit})
			if err != nil {
				return nil, nil, toolErr(err)
			}
			if infos == nil {
				infos = []store.ThreadInfo{}
			}
			return nil, api.ThreadList{Threads: infos, Next: next}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolThreadSummary, Description: "A thread's observations (what compaction wrote about the parts that left the window, with the seq ranges they cover) and how its messages appear in the window."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in ThreadSummaryIn) (*mcp.CallToolResult, any, error) {
			info, err := t.st.Thread(ctx, tenant, in.Thread)
			if err != nil {
				return nil, nil, toolErr(err)
			}
			blocks, err := t.a.Observations(ctx, tenant, in.Thread)
			if err != nil {
				return nil, nil, toolErr(err)
			}
			forms, err := t.a.Forms(ctx, tenant, in.Thread)
			if err != nil {
				return nil, nil, toolErr(err)
			}
			out := ThreadSummary{Thread: info, Observations: blocks, Forms: map[string]int{}}
			if out.Observations == nil {
				out.Observations = []window.Block{}
			}
			for _, f := range forms {
				out.Forms[f]++
			}
			return nil, out, nil
		})
	return s
}

func itemOf(it store.Memory) MemoryItem {
	var v any
	_ = json.Unmarshal(it.Value, &v)
	return MemoryItem{Namespace: it.Namespace, Key: it.Key, Value: v, Updated: it.Updated.Format("2006-01-02T15:04:05Z07:00"), Score: it.Score}
}

// toolErr turns a store error into what the client sees: not found and
// invalid arguments say so; anything else stays generic.
func toolErr(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errors.New("not found")
	case errors.Is(err, store.ErrInvalid):
		return err
	}
	return fmt.Errorf("internal error")
}
