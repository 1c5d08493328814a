// Package api is Mneme's JSON API under /api/: threads and their logs,
// windows, compaction events, usage history, archive search and read by
// ref, long-term memory, export, policy and manual compaction. It serves
// the inspector page and any tool that wants to look into a tenant's
// threads; docs/api.md and docs/openapi.yaml describe it, and a test holds
// the OpenAPI file to the handlers.
//
// Every handler acts for the tenant the server's auth put in the request's
// context (tenant.Of): a thread of another tenant is 404, exactly like
// a missing one (I8). The package must not import the proxy's handlers, a
// store backend or SQL; it reads through the engine, store.Store, recall
// and memory.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/status"
	"github.com/mnemehq/mneme/memory"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/tenant"
	"github.com/mnemehq/mneme/window"
)

// Config configures the API.
type Config struct {
	// Engine is the engine; required.
	Engine *mneme.Engine
	// History gives the usage chart its per-call points; nil: a fresh one
	// that nothing feeds (the chart then shows compactions and the current
	// window only). Feed it from mneme.Config.OnUsage.
	History *History
	// Recall searches the archive; nil: BM25 over the Engine's store.
	Recall *recall.Recall
	// Memory is the long-term memory; nil: over the Engine's store.
	Memory *memory.Bank
	// Tenant returns the tenant a request acts for; default tenant.Of.
	Tenant func(context.Context) string
	// Logger for failures; default slog.Default().
	Logger *slog.Logger
}

// API serves /api/. Create it with New.
type API struct {
	cfg    Config
	m      *mneme.Engine
	st     store.Store
	hist   *History
	rec    *recall.Recall
	mem    *memory.Bank
	tenant func(context.Context) string
	log    *slog.Logger
	mux    *http.ServeMux
}

// Route is one method and path the API serves, in http.ServeMux syntax
// (the OpenAPI file lists the same paths).
type Route struct {
	Method, Path string
}

// New returns the API for cfg.
func New(cfg Config) (*API, error) {
	if cfg.Engine == nil {
		return nil, errors.New("api: Config.Engine is required")
	}
	a := &API{cfg: cfg, m: cfg.Engine, st: cfg.Engine.Store(), hist: cfg.History, rec: cfg.Recall, mem: cfg.Memory, tenant: cfg.Tenant, log: cfg.Logger}
	if a.hist == nil {
		a.hist = NewHistory(0, 0)
	}
	if a.rec == nil {
		a.rec = &recall.Recall{Store: a.st, Logger: cfg.Logger}
	}
	if a.mem == nil {
		a.mem = memory.New(a.st, memory.Options{Logger: cfg.Logger})
	}
	if a.tenant == nil {
		a.tenant = tenant.Of
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.mux = http.NewServeMux()
	for _, r := range a.routes() {
		a.mux.HandleFunc(r.Method+" "+r.Path, r.h)
	}
	a.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such API route: "+r.Method+" "+r.URL.Path)
	})
	return a, nil
}

// History returns the usage history the API reads (to feed it).
func (a *API) History() *History { return a.hist }

type route struct {
	Method, Path string
	h            http.HandlerFunc
}

func (a *API) routes() []route {
	return []route{
		{"GET", "/api/threads", a.listThreads},
		{"GET", "/api/threads/{id}", a.threadLog},
		{"DELETE", "/api/threads/{id}", a.deleteThread},
		{"GET", "/api/threads/{id}/window", a.threadWindow},
		{"GET", "/api/threads/{id}/events", a.threadEvents},
		{"GET", "/api/threads/{id}/usage", a.threadUsage},
		{"GET", "/api/threads/{id}/export", a.threadExport},
		{"GET", "/api/threads/{id}/policy", a.getPolicy},
		{"PUT", "/api/threads/{id}/policy", a.putPolicy},
		{"POST", "/api/threads/{id}/compact", a.compact},
		{"POST", "/api/threads/{id}/fork", a.fork},
		{"GET", "/api/search", a.search},
		{"GET", "/api/read/{ref}", a.read},
		{"GET", "/api/memory", a.searchMemory},
		{"GET", "/api/memory/item", a.getMemory},
		{"PUT", "/api/memory/item", a.putMemory},
		{"DELETE", "/api/memory/item", a.deleteMemory},
		{"DELETE", "/api/memory", a.deleteNamespace},
	}
}

// Routes lists what the API serves.
func (a *API) Routes() []Route {
	var out []Route
	for _, r := range a.routes() {
		out = append(out, Route{r.Method, r.Path})
	}
	return out
}

// ServeHTTP serves /api/ (mount it behind the server's auth:
// srv.Handle("/api/", a)).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// ---- responses --------------------------------------------------------

// ErrorBody is the JSON of every error: {"error": {"code", "message"}}.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ThreadList is a page of GET /api/threads.
type ThreadList struct {
	Threads []store.ThreadInfo `json:"threads"`
	// Next is the cursor of the next page ("" on the last one).
	Next string `json:"next,omitempty"`
}

// Entry is one event of a thread's log as the timeline shows it.
type Entry struct {
	Seq    int64      `json:"seq"`
	Kind   store.Kind `json:"kind"`
	At     time.Time  `json:"at"`
	Ref    string     `json:"ref,omitempty"`
	Tokens int        `json:"tokens,omitempty"`
	// Message events: the role, the form the message takes in the window
	// (raw, evicted, masked, observed, catalogued, dropped), the tools it
	// calls or answers, and a preview of its text (Chars is the full
	// length).
	Role    message.Role `json:"role,omitempty"`
	Form    string       `json:"form,omitempty"`
	Tools   []string     `json:"tools,omitempty"`
	Preview string       `json:"preview,omitempty"`
	Chars   int          `json:"chars,omitempty"`
	// Other events carry their payload.
	Data json.RawMessage `json:"data,omitempty"`
}

// ThreadLog is a page of GET /api/threads/{id}.
type ThreadLog struct {
	Thread store.ThreadInfo `json:"thread"`
	Events []Entry          `json:"events"`
	// Next is the seq the next page starts at (0 on the last page).
	Next int64 `json:"next,omitempty"`
	// Forms counts the whole thread's messages by form.
	Forms map[string]int `json:"forms"`
}

// WindowView is GET /api/threads/{id}/window.
type WindowView struct {
	Messages    []message.Message `json:"messages"`
	Usage       mneme.Usage       `json:"usage"`
	NeedsRecall bool              `json:"needs_recall"`
}

// Compaction is one compacted event: a range that left the window, what
// replaced it, and its cost.
type Compaction struct {
	Seq int64     `json:"seq"`
	At  time.Time `json:"at"`
	window.CompactedData
}

// Reflection is one reflected event.
type Reflection struct {
	Seq int64     `json:"seq"`
	At  time.Time `json:"at"`
	window.ReflectedData
}

// MaskStep is one masked event: tool results replaced by placeholders.
type MaskStep struct {
	Seq  int64     `json:"seq"`
	At   time.Time `json:"at"`
	Seqs []int64   `json:"seqs"`
}

// Eviction is a tool result shown as a preview in the current window.
type Eviction struct {
	Seq    int64  `json:"seq"`
	Ref    string `json:"ref"`
	Tokens int    `json:"tokens"`
}

// PolicyChange is one policy event.
type PolicyChange struct {
	Seq    int64           `json:"seq"`
	At     time.Time       `json:"at"`
	Policy json.RawMessage `json:"policy"`
}

// EventsView is GET /api/threads/{id}/events: what the pipeline did.
type EventsView struct {
	Compactions []Compaction   `json:"compactions"`
	Reflections []Reflection   `json:"reflections"`
	Masked      []MaskStep     `json:"masked"`
	Evictions   []Eviction     `json:"evictions"`
	Policies    []PolicyChange `json:"policies"`
	// Observations are the memory block's entries now, with the ranges
	// they cover.
	Observations []window.Block `json:"observations"`
}

// UsageView is GET /api/threads/{id}/usage.
type UsageView struct {
	Usage mneme.ThreadUsage `json:"usage"`
	// Points are the last windows served for the thread by this process,
	// oldest first (empty after a restart).
	Points []Point `json:"points"`
}

// SearchResult is GET /api/search.
type SearchResult struct {
	Hits []store.Hit `json:"hits"`
}

// MemoryList is GET /api/memory.
type MemoryList struct {
	Items []store.Memory `json:"items"`
}

// MemoryPut is the body of PUT /api/memory/item.
type MemoryPut struct {
	Value      json.RawMessage `json:"value"`
	TTLSeconds int64           `json:"ttl_seconds,omitempty"`
}

// Deleted is DELETE /api/memory.
type Deleted struct {
	Deleted int `json:"deleted"`
}

// CompactResult is POST /api/threads/{id}/compact.
type CompactResult struct {
	Usage mneme.Usage `json:"usage"`
}

// ForkRequest is the body of POST /api/threads/{id}/fork.
type ForkRequest struct {
	// ThroughSeq: the branch holds the thread's events up to this seq (0:
	// all of them).
	ThroughSeq int64 `json:"through_seq,omitempty"`
	// ID names the branch; empty: derived from the thread and the seq.
	ID string `json:"id,omitempty"`
}

// Forked answers POST /api/threads/{id}/fork.
type Forked struct {
	ID         string `json:"id"`
	ForkedFrom string `json:"forked_from"`
}

// ---- helpers ----------------------------------------------------------

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// WriteError answers with an error in the API's shape (ErrorBody); the
// server uses it for the refusals it makes before the API runs (auth,
// limits, bodies).
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	writeError(w, status, code, msg)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b ErrorBody
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b)
}

// fail answers err with the status internal/status maps it to (the
// mapping the proxy and MCP share): not found 404, invalid or over budget
// 400, conflict 409, store unavailable 503 with Retry-After, anything else
// 500 with the request id (logged with it, its text not shown).
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	st := status.Of(r.Context(), err)
	status.Log(r.Context(), a.log, "api "+r.Pattern, st, err)
	if st.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(st.RetryAfter))
	}
	writeError(w, st.Code, st.Kind, st.Message)
}

// errBadRequest marks a malformed request (the client's mistake: 400).
var errBadRequest = fmt.Errorf("%w: bad request", store.ErrInvalid)

// intParam reads an integer query parameter within [lo, hi]; def when absent.
func intParam(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s must be an integer in [%d, %d]", errBadRequest, name, lo, hi)
	}
	return n, nil
}

// thread checks that the thread exists for the caller's tenant.
func (a *API) thread(r *http.Request) (tenant, id string, info store.ThreadInfo, err error) {
	tenant, id = a.tenant(r.Context()), r.PathValue("id")
	if err := backend.CheckScope(tenant, id); err != nil {
		return tenant, id, info, err
	}
	info, err = a.st.Thread(r.Context(), tenant, id)
	return tenant, id, info, err
}

// ---- threads ----------------------------------------------------------

// maxScan bounds how many threads a filtered listing looks through.
const maxScan = 10000

func (a *API) listThreads(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", 50, 1, 500)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	tenant := a.tenant(r.Context())
	q := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("q")))
	cursor := r.URL.Query().Get("cursor")
	out := ThreadList{Threads: []store.ThreadInfo{}}
	if q == "" {
		infos, next, err := a.st.Threads(r.Context(), tenant, store.Page{Cursor: cursor, Limit: int(limit)})
		if err != nil {
			a.fail(w, r, err)
			return
		}
		out.Threads, out.Next = append(out.Threads, infos...), next
		writeJSON(w, http.StatusOK, out)
		return
	}
	// A filter by id: scan pages until the page is full.
	for scanned := 0; scanned < maxScan; {
		infos, next, err := a.st.Threads(r.Context(), tenant, store.Page{Cursor: cursor, Limit: 200})
		if err != nil {
			a.fail(w, r, err)
			return
		}
		scanned += len(infos)
		for _, ti := range infos {
			if strings.Contains(strings.ToLower(ti.ID), q) && len(out.Threads) < int(limit) {
				out.Threads = append(out.Threads, ti)
			}
		}
		if next == "" || len(out.Threads) >= int(limit) {
			break
		}
		cursor = next
	}
	writeJSON(w, http.StatusOK, out)
}

// previewChars bounds an entry's preview.
const previewChars = 400

func (a *API) threadLog(w http.ResponseWriter, r *http.Request) {
	tenant, id, info, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	from, err := intParam(r, "from", 1, 1, 1<<62)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	limit, err := intParam(r, "limit", 200, 1, 1000)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var forms map[int64]string
	if err := a.m.Thread(tenant, id).Inspect(r.Context(), func(st *window.State) error {
		forms = formsOf(st)
		return nil
	}); err != nil {
		a.fail(w, r, err)
		return
	}
	evs, err := a.st.Load(r.Context(), tenant, id, from, int(limit))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := ThreadLog{Thread: info, Events: make([]Entry, 0, len(evs)), Forms: map[string]int{}}
	for _, f := range forms {
		out.Forms[f]++
	}
	for _, ev := range evs {
		out.Events = append(out.Events, entryOf(ev, forms))
	}
	if n := len(evs); n == int(limit) && evs[n-1].Seq < info.Events {
		out.Next = evs[n-1].Seq + 1
	}
	writeJSON(w, http.StatusOK, out)
}

func entryOf(ev store.Event, forms map[int64]string) Entry {
	e := Entry{Seq: ev.Seq, Kind: ev.Kind, At: ev.At, Ref: ev.Ref, Tokens: ev.Tokens, Data: ev.Data}
	if m := ev.Message; m != nil {
		e.Role, e.Form = m.Role, forms[ev.Seq]
		if e.Form == "" {
			e.Form = FormRaw
		}
		text := m.PlainText()
		e.Chars = len(text)
		e.Preview = preview(text, previewChars)
		seen := map[string]bool{}
		for _, p := range m.Parts {
			name := p.ToolName
			if name != "" && !seen[name] && (p.Type == message.ToolCall || p.Type == message.ToolResult) {
				seen[name] = true
				e.Tools = append(e.Tools, name)
			}
		}
	}
	return e
}

// preview cuts s to about n bytes on a rune boundary.
func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

func (a *API) deleteThread(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		// Not found in the store is for the engine to judge: a new
		// thread whose first request is at the model exists, its messages
		// not yet written (Thread.Delete).
		a.fail(w, r, err)
		return
	}
	if err := a.m.Thread(tenant, id).Delete(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	a.hist.Forget(tenant, id)
	a.m.PurgeSoon() // erasure: the deleted bytes leave the store's files too
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) threadWindow(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	win, err := a.m.Thread(tenant, id).Window(r.Context(), mneme.WindowOptions{})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := WindowView{Messages: win.Messages, Usage: win.Usage, NeedsRecall: win.NeedsRecall}
	if out.Messages == nil {
		out.Messages = []message.Message{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) threadEvents(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := EventsView{Compactions: []Compaction{}, Reflections: []Reflection{}, Masked: []MaskStep{}, Evictions: []Eviction{}, Policies: []PolicyChange{}, Observations: []window.Block{}}
	var evicted map[int64]bool
	if err := a.m.Thread(tenant, id).Inspect(r.Context(), func(st *window.State) error {
		out.Observations = append(out.Observations, st.Blocks()...)
		evicted = map[int64]bool{}
		for seq, f := range st.FormsOf() {
			if f == window.Evicted {
				evicted[seq] = true
			}
		}
		return nil
	}); err != nil {
		a.fail(w, r, err)
		return
	}
	for from := int64(1); ; {
		evs, err := a.st.Load(r.Context(), tenant, id, from, 2000)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		for _, ev := range evs {
			switch ev.Kind {
			case store.KindCompacted:
				c := Compaction{Seq: ev.Seq, At: ev.At}
				if json.Unmarshal(ev.Data, &c.CompactedData) == nil {
					out.Compactions = append(out.Compactions, c)
				}
			case store.KindReflected:
				rf := Reflection{Seq: ev.Seq, At: ev.At}
				if json.Unmarshal(ev.Data, &rf.ReflectedData) == nil {
					out.Reflections = append(out.Reflections, rf)
				}
			case store.KindMasked:
				var d window.MaskedData
				if json.Unmarshal(ev.Data, &d) == nil {
					out.Masked = append(out.Masked, MaskStep{Seq: ev.Seq, At: ev.At, Seqs: d.Seqs})
				}
			case store.KindPolicy:
				out.Policies = append(out.Policies, PolicyChange{Seq: ev.Seq, At: ev.At, Policy: ev.Data})
			case store.KindMessage:
				if evicted[ev.Seq] {
					out.Evictions = append(out.Evictions, Eviction{Seq: ev.Seq, Ref: ev.Ref, Tokens: ev.Tokens})
				}
			}
		}
		if len(evs) < 2000 {
			break
		}
		from = evs[len(evs)-1].Seq + 1
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) threadUsage(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	u, err := a.m.Thread(tenant, id).Usage(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, UsageView{Usage: u, Points: a.hist.Points(tenant, id)})
}

func (a *API) threadExport(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", safeFilename(id)+".jsonl"))
	if _, err := mneme.WriteExport(r.Context(), a.st, tenant, id, w); err != nil {
		// Headers are gone: the truncated body is all the client gets.
		a.log.Error("api: export", "thread", id, "err", err)
	}
}

func safeFilename(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, id)
}

func (a *API) getPolicy(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.m.Thread(tenant, id).Policy(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// maxBody bounds the JSON bodies the API reads.
const maxBody = 1 << 20

func (a *API) putPolicy(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	t := a.m.Thread(tenant, id)
	cur, err := t.Policy(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := cur.MergeJSON(body)
	if err != nil {
		a.fail(w, r, fmt.Errorf("%w: policy: %w", errBadRequest, err))
		return
	}
	if err := t.SetPolicy(r.Context(), p); err != nil {
		a.fail(w, r, err)
		return
	}
	if p, err = t.Policy(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%w: body: %w", errBadRequest, err)
	}
	if !utf8.Valid(b) {
		// JSON text is UTF-8; a decoder would silently replace what is not.
		return nil, fmt.Errorf("%w: the body is not valid UTF-8", errBadRequest)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: the body is not valid JSON", errBadRequest)
	}
	return b, nil
}

func (a *API) compact(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	win, err := a.m.Thread(tenant, id).Compact(r.Context(), mneme.WindowOptions{})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, CompactResult{Usage: win.Usage})
}

// fork starts a branch of the thread (mneme.Thread.Fork).
func (a *API) fork(w http.ResponseWriter, r *http.Request) {
	tenant, id, _, err := a.thread(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var req ForkRequest
	body, err := readBody(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	d := json.NewDecoder(strings.NewReader(string(body)))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		a.fail(w, r, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	if req.ThroughSeq < 0 {
		a.fail(w, r, fmt.Errorf("%w: through_seq must not be negative", errBadRequest))
		return
	}
	child, err := a.m.Thread(tenant, id).Fork(r.Context(), req.ThroughSeq, req.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, Forked{ID: child.ID(), ForkedFrom: id})
}

// ---- archive ----------------------------------------------------------

func (a *API) search(w http.ResponseWriter, r *http.Request) {
	tenant := a.tenant(r.Context())
	q := r.URL.Query()
	limit, err := intParam(r, "limit", recall.DefaultLimit, 1, recall.MaxLimit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if strings.TrimSpace(q.Get("q")) == "" {
		a.fail(w, r, fmt.Errorf("%w: q is required", errBadRequest))
		return
	}
	sq := store.SearchQuery{Text: q.Get("q"), Thread: q.Get("thread"), Role: message.Role(q.Get("role")), Tool: q.Get("tool"), Limit: int(limit)}
	if sq.Thread != "" {
		if _, err := a.st.Thread(r.Context(), tenant, sq.Thread); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	hits, err := a.rec.Search(r.Context(), tenant, sq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if hits == nil {
		hits = []store.Hit{}
	}
	writeJSON(w, http.StatusOK, SearchResult{Hits: RankScores(hits)})
}

func (a *API) read(w http.ResponseWriter, r *http.Request) {
	offset, err := intParam(r, "offset", 0, 0, 1<<40)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	limit, err := intParam(r, "limit", 0, 0, recall.MaxPageBytes)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := recall.Read(r.Context(), a.st, a.tenant(r.Context()), "", r.PathValue("ref"), int(offset), int(limit))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// ---- long-term memory -------------------------------------------------

// namespace reads the namespace from repeated ns parameters (?ns=a&ns=b).
func namespace(r *http.Request) []string { return r.URL.Query()["ns"] }

func (a *API) searchMemory(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", memory.DefaultLimit, 1, 1000)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	offset, err := intParam(r, "offset", 0, 0, 1<<30)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var filter map[string]any
	if f := r.URL.Query().Get("filter"); f != "" {
		if err := json.Unmarshal([]byte(f), &filter); err != nil {
			a.fail(w, r, fmt.Errorf("%w: filter must be a JSON object: %w", errBadRequest, err))
			return
		}
	}
	tenant, q := a.tenant(r.Context()), r.URL.Query().Get("q")
	var items []store.Memory
	if q == "" && filter == nil {
		items, err = a.mem.List(r.Context(), tenant, namespace(r), int(limit), int(offset))
	} else {
		if offset > 0 {
			a.fail(w, r, fmt.Errorf("%w: offset applies to listings only (no q, no filter)", errBadRequest))
			return
		}
		items, err = a.mem.Search(r.Context(), tenant, namespace(r), q, filter, int(limit))
		items = RankItemScores(items)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if items == nil {
		items = []store.Memory{}
	}
	writeJSON(w, http.StatusOK, MemoryList{Items: items})
}

func (a *API) getMemory(w http.ResponseWriter, r *http.Request) {
	it, err := a.mem.Get(r.Context(), a.tenant(r.Context()), namespace(r), r.URL.Query().Get("key"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

// MaxTTLSeconds is the longest ttl_seconds a memory item takes: 100 years,
// well inside what a time.Duration holds (a larger value used to overflow
// into a negative TTL).
const MaxTTLSeconds = 100 * 365 * 24 * 3600

func (a *API) putMemory(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var in MemoryPut
	err = json.Unmarshal(body, &in)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field == "ttl_seconds" || err == nil && (in.TTLSeconds < 0 || in.TTLSeconds > MaxTTLSeconds) {
		a.fail(w, r, fmt.Errorf("%w: ttl_seconds must be an integer in [0, %d] (0: no expiry)", errBadRequest, MaxTTLSeconds))
		return
	}
	if err != nil || len(in.Value) == 0 {
		a.fail(w, r, fmt.Errorf("%w: want {\"value\": JSON, \"ttl_seconds\": n >= 0}", errBadRequest))
		return
	}
	it, err := a.mem.Put(r.Context(), a.tenant(r.Context()), namespace(r), r.URL.Query().Get("key"), in.Value, time.Duration(in.TTLSeconds)*time.Second)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

func (a *API) deleteMemory(w http.ResponseWriter, r *http.Request) {
	if err := a.mem.Delete(r.Context(), a.tenant(r.Context()), namespace(r), r.URL.Query().Get("key")); err != nil {
		a.fail(w, r, err)
		return
	}
	a.m.PurgeSoon()
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) deleteNamespace(w http.ResponseWriter, r *http.Request) {
	ns := namespace(r)
	if len(ns) == 0 {
		a.fail(w, r, fmt.Errorf("%w: ns is required (deleting every namespace at once is not offered)", errBadRequest))
		return
	}
	n, err := a.st.DeleteNamespace(r.Context(), a.tenant(r.Context()), ns)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if n > 0 {
		a.m.PurgeSoon()
	}
	writeJSON(w, http.StatusOK, Deleted{Deleted: n})
}
