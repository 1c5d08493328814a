// Package mneme is the context and memory layer for LLM agents: durable,
// append-only conversation threads, and for every model call a window that
// fits the budget, keeps its prefix stable for provider caches, repairs tool
// pairs and loses nothing (docs/design.md states its invariants, I1–I8).
//
// Open an Engine on a store, take a Thread, Append what happens, and ask for
// the Window before each model call. The package links no database driver:
// import the backend a DSN names, as with database/sql:
//
//	import _ "github.com/mnemehq/mneme/store/sqlite"
//
//	m, _ := mneme.Open(ctx, mneme.Config{DSN: "sqlite:./mneme.db"})
//	t := m.Thread("default", "run-42")
//	t.Append(ctx, message.NewText(message.User, "Fix INV-4401"))
//	w, _ := t.Window(ctx, mneme.WindowOptions{})
//	// send w.Messages to the model, Append its reply
//
// The package holds the engine's front door; the pipeline itself lives in
// window/, storage in store/, token counting in token/.
package mneme

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/memory"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// Policy is how a thread's window is built; see window.Policy.
type Policy = window.Policy

// Usage is what a window costs and what the pipeline did; see window.Usage.
type Usage = window.Usage

// BudgetError says what cannot fit in the budget; see window.BudgetError.
type BudgetError = window.BudgetError

// DefaultPolicy returns the defaults that suit most agents.
func DefaultPolicy() Policy { return window.DefaultPolicy() }

// DefaultDSN is the embedded default store: one SQLite file.
const DefaultDSN = "sqlite:./mneme.db"

// Config configures an Engine. The zero value opens DefaultDSN with
// DefaultPolicy.
type Config struct {
	// Store is used as is when set; otherwise DSN is opened (and closed by
	// Engine.Close).
	Store store.Store
	// DSN: "sqlite:PATH", "memory:" or "postgres://...", opened by the
	// backend registered for its scheme (see store/dsn: the program
	// imports store/sqlite, store/postgres or store/inmem for its
	// side effect). Default DefaultDSN.
	DSN string
	// Policy is the default for every thread; a thread's policy events
	// override it. Zero value: DefaultPolicy().
	Policy *Policy
	// Models maps model names to context windows and tokenizers. Default
	// token.DefaultTable().
	Models *token.Table
	// Compactor writes observations for the observe strategy (and, when it
	// implements Reflector, condenses them). Nil: NewCompactor over the
	// Summarizer below.
	Compactor Compactor
	// Summarizer is the model that writes observations and reflections
	// (it may be cheaper than the agent's). With no Model, the
	// deterministic extractive summarizer does. When a Model is set and
	// Policy is nil, the default strategy becomes observe.
	Summarizer compact.LLMConfig
	// Embedder, when set and the store keeps vectors, makes archive and
	// memory search hybrid (BM25 + vectors, reciprocal rank fusion). New
	// messages are embedded in the background; a failing embedder only
	// degrades search to BM25.
	Embedder embed.Embedder
	// Buffer precomputes observations in the background as a thread's
	// window passes 20%, 40%, 60% and 80% of its trigger, so that the call
	// crossing the trigger rarely waits for the summarizer. It only runs
	// for a summarizer that calls a model. Off by default in the library;
	// the server turns it on.
	Buffer bool
	// OnUsage fires after every window; OnCompact after every compaction.
	// They run on the caller's goroutine: keep them quick.
	OnUsage   func(tenant, thread string, u Usage)
	OnCompact func(tenant, thread string, c CompactEvent)
	// Logger for warnings (unknown models, fallbacks). Default slog.Default().
	Logger *slog.Logger
	// MaxThreads bounds how many threads keep a materialised window in
	// memory (default 10,000); others are rebuilt from the log on use.
	MaxThreads int
	// MaxBackgroundJobs bounds the background observations and reflections
	// running at once (default DefaultMaxBackgroundJobs); beyond it the
	// work happens on the request path (see jobs.go).
	MaxBackgroundJobs int
	// RequestMemoBytes bounds the memory of the engine's memo of each
	// thread's last resend request (what lets AppendHistory project only
	// what a request adds): 0 means DefaultRequestMemoBytes; a negative
	// value keeps no memo (every request is projected whole).
	RequestMemoBytes int
	// Refs, when set, makes the refs of new messages instead of the
	// store (store.RefMaker) or store.NewRef (unguessable either way, I8).
	// It is for benchmarks that must repeat token for token from a seed (a
	// ref is counted in masked placeholders and recalled blocks); a server
	// never sets it. It may be called from several goroutines at once.
	Refs func() string
}

// CompactEvent reports one compaction or reflection.
type CompactEvent struct {
	Seq       int64 // the event's seq in the log
	Compacted *window.CompactedData
	Reflected *window.ReflectedData
	Masked    int
	// Buffered: the observation was computed in the background before the
	// trigger (no model call on the request path).
	Buffered bool
}

// Engine owns the store and the materialised windows of open threads. It is
// safe for concurrent use.
type Engine struct {
	id        string // this process's lease owner name
	store     store.Store
	ownsStore bool
	refs      func() string // the refs of new messages (newRef)
	policy    Policy
	models    *token.Table
	tokens    *token.Cache
	compactor Compactor
	reflector Reflector
	buffering bool // background buffering is on and worth it
	cfg       Config

	// Background jobs (buffering): bg ends them on Close, jobs waits for them.
	bg       context.Context
	stopBg   context.CancelFunc
	jobs     sync.WaitGroup
	running  atomic.Int32
	jobSlots chan struct{} // bounds buffering and reflection jobs (jobs.go)
	log      *slog.Logger

	recall     *recall.Recall
	memory     *memory.Bank
	indexer    *recall.Indexer
	recallCost recallCost

	// mu guards threads, idle and every state's pins and idle element.
	mu      sync.Mutex
	threads map[threadKey]*threadState
	idle    list.List // unpinned states, most recently used first

	purge purgeState // background purges after deletions (retention.go)

	// recallKept is what the states keep for auto-recall, in tokens
	// (keptRecall).
	recallKept atomic.Int64

	// requests keeps the last request's projection of recently named
	// threads (history.go).
	requests historyMemo
}

type threadKey struct{ tenant, id string }

// newRef is the ref of a new message: Config.Refs's, else the store's
// when it makes its own (store.RefMaker), else store.NewRef's.
func (m *Engine) newRef() string { return m.refs() }

// refsOf returns the source of new messages' refs for cfg and the store.
func refsOf(cfg Config, st store.Store) func() string {
	if cfg.Refs != nil {
		return cfg.Refs
	}
	if rm, ok := store.As[store.RefMaker](st); ok {
		return rm.NewRef
	}
	return store.NewRef
}

// Open opens the store and returns an Engine.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	m := &Engine{id: "mneme-" + store.NewRef()[2:], cfg: cfg, store: cfg.Store, models: cfg.Models, compactor: cfg.Compactor, log: cfg.Logger}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.models == nil {
		m.models = token.DefaultTable()
	}
	m.policy = DefaultPolicy()
	if cfg.Policy != nil {
		m.policy = *cfg.Policy
	}
	if err := m.policy.Validate(); err != nil {
		return nil, err
	}
	if m.store == nil {
		d := cfg.DSN
		if d == "" {
			d = DefaultDSN
		}
		s, err := dsn.Open(ctx, d)
		if err != nil {
			return nil, err
		}
		m.store, m.ownsStore = s, true
	}
	m.refs = refsOf(cfg, m.store)
	if m.compactor == nil {
		s, err := newSummarizer(cfg.Summarizer, m.models)
		if err != nil {
			if m.ownsStore {
				m.store.Close()
			}
			return nil, err
		}
		m.compactor = NewCompactor(s)
		if cfg.Summarizer.Model != "" && cfg.Policy == nil {
			m.policy.Strategy = window.Observe
		}
	}
	if r, ok := m.compactor.(Reflector); ok {
		m.reflector = r
	} else {
		m.reflector = NewCompactor(nil).(Reflector)
	}
	if sc, ok := m.compactor.(summarizerCompactor); !ok || sc.slow() {
		m.buffering = cfg.Buffer
	}
	m.bg, m.stopBg = context.WithCancel(context.Background())
	m.jobSlots = make(chan struct{}, cmp.Or(max(cfg.MaxBackgroundJobs, 0), DefaultMaxBackgroundJobs))
	m.startRecall()
	m.tokens = token.NewCache()
	m.threads = map[threadKey]*threadState{}
	if cfg.RequestMemoBytes != 0 {
		m.requests.limit = max(cfg.RequestMemoBytes/2, -1)
	}
	return m, nil
}

// Close cancels the background jobs and waits for them, then closes the
// store if the Engine opened it.
func (m *Engine) Close() error {
	m.stopBg()
	m.jobs.Wait()
	if m.ownsStore {
		return m.store.Close()
	}
	return nil
}

// Store returns the underlying store.
func (m *Engine) Store() store.Store { return m.store }

// Health reports whether the store can take writes now (store.HealthChecker);
// nil for a store that cannot tell.
func (m *Engine) Health(ctx context.Context) error {
	if h, ok := store.As[store.HealthChecker](m.store); ok {
		return h.Health(ctx)
	}
	return nil
}

// Policy returns the default policy.
func (m *Engine) Policy() Policy { return m.policy }

// Models returns the model table.
func (m *Engine) Models() *token.Table { return m.models }

// Thread returns a handle on one thread of a tenant. It does no I/O: the
// thread exists once something is appended to it.
func (m *Engine) Thread(tenant, id string) *Thread {
	return &Thread{m: m, tenant: tenant, id: id}
}

// pin returns the thread's cached state, creating an empty one, pinned:
// it stays in the cache (the only state of that thread in this process)
// until unpin. Pinning happens under the Engine's lock, so a state is never
// evicted or replaced between being found and being locked by its caller.
func (m *Engine) pin(k threadKey) *threadState {
	m.mu.Lock()
	defer m.mu.Unlock()
	ts := m.threads[k]
	if ts == nil {
		ts = &threadState{key: k, recall: keptRecall{total: &m.recallKept}}
		m.threads[k] = ts
	}
	m.pinLocked(ts)
	m.evictLocked()
	m.reclaimRecallLocked()
	return ts
}

// pinAgain adds a pin to a state its caller has pinned already (a
// background job that outlives the request).
func (m *Engine) pinAgain(ts *threadState) {
	m.mu.Lock()
	m.pinLocked(ts)
	m.mu.Unlock()
}

func (m *Engine) pinLocked(ts *threadState) {
	if ts.pins == 0 && ts.idle != nil {
		m.idle.Remove(ts.idle)
		ts.idle = nil
	}
	ts.pins++
}

// unpin releases a pin; a state with none left becomes the most recently
// used of the evictable ones.
func (m *Engine) unpin(ts *threadState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ts.pins--; ts.pins == 0 {
		ts.idle = m.idle.PushFront(ts)
		m.evictLocked()
	}
}

// unlock unlocks a state that load returned (locked and pinned).
func (m *Engine) unlock(ts *threadState) {
	m.snapshotDue(ts)
	ts.mu.Unlock()
	m.unpin(ts)
}

func (m *Engine) maxThreads() int {
	if m.cfg.MaxThreads > 0 {
		return m.cfg.MaxThreads
	}
	return 10000
}

// evictLocked drops least recently used unpinned states while the cache
// holds more than MaxThreads: O(1) per state dropped (the idle list is in
// use order). Pinned states are never dropped, so the cache may exceed its
// bound by the states in use. A dropped state is rebuilt from the log when
// next used.
func (m *Engine) evictLocked() {
	for max := m.maxThreads(); len(m.threads) > max; {
		e := m.idle.Back()
		if e == nil {
			return
		}
		ts := m.idle.Remove(e).(*threadState)
		ts.idle = nil
		ts.recall.drop()
		delete(m.threads, ts.key)
	}
}

// reclaimRecallLocked drops the events kept for auto-recall by the least
// recently used unpinned states (the states themselves stay) while the
// states keep more than recallReclaimAt tokens in all: the Engine's
// bound (maxRecallKeptTokens) is for the threads in use, and without this
// it stayed held by the first threads that filled it, idle ones included,
// until their states were evicted (MaxThreads), so a new thread's history
// was never kept and its first recalls loaded and decoded their hits'
// neighbourhoods from the store. An unpinned state is in no one's hands
// (pins change under m.mu), as when evictLocked drops one. At most
// reclaimScan states are looked at per call.
func (m *Engine) reclaimRecallLocked() {
	if m.recallKept.Load() <= recallReclaimAt {
		return
	}
	e := m.idle.Back()
	for n := 0; e != nil && n < reclaimScan && m.recallKept.Load() > recallReclaimTo; n++ {
		ts := e.Value.(*threadState)
		ts.recall.drop()
		e = e.Prev()
	}
}

// The kept events are reclaimed from idle states past three quarters of
// the bound, down to half: room for a few new histories of hundreds of
// messages at a time.
const (
	recallReclaimAt = maxRecallKeptTokens * 3 / 4
	recallReclaimTo = maxRecallKeptTokens / 2
	reclaimScan     = 256
)

// ModelInfo resolves a policy's model: the usable budget and the counter.
func (m *Engine) modelInfo(p Policy) (budget int, c token.Counter, err error) {
	mod, known := m.models.Lookup(p.Model)
	if !known && p.Model != "" {
		m.log.Warn("unknown model: using the default context window and tokenizer", "model", p.Model, "context", mod.Context, "tokenizer", mod.Tokenizer)
	}
	ctxTokens := mod.Context
	if p.BudgetTokens > 0 {
		ctxTokens = p.BudgetTokens
	}
	c, err = token.Get(mod.Tokenizer)
	if err != nil {
		return 0, nil, fmt.Errorf("model %q: %w", p.Model, err)
	}
	return ctxTokens - outputReserve(p, mod, ctxTokens), c, nil
}

// outputReserve is the policy's reserve, or the model's default when the
// policy leaves it at 0. A reserve that would leave less than half of a
// small window or budget is shrunk to the default (a quarter of it at
// most): a small budget_tokens narrows the reply room instead of failing.
func outputReserve(p Policy, mod token.Model, ctxTokens int) int {
	auto := mod.OutputReserve(ctxTokens)
	if p.ReserveOutputTokens <= 0 {
		return auto
	}
	if p.ReserveOutputTokens > ctxTokens/2 {
		return min(p.ReserveOutputTokens, auto)
	}
	return p.ReserveOutputTokens
}

// sizer adapts the token cache to the window's Sizer.
type sizer struct {
	cache *token.Cache
	c     token.Counter
}

func (s sizer) Message(key string, msg message.Message) int {
	return s.cache.MessageTokens(s.c, key, msg)
}
func (s sizer) Text(t string) int { return s.c.Count(t) }

// CachedText is Text(t) through the cache, keyed by t's content: for texts
// counted again on later requests (auto-recall's hits), a hash instead of
// a count. The cache holds message counts: t's is a user message's less
// the message's own tokens.
func (s sizer) CachedText(t string) int {
	return s.cache.MessageTokens(s.c, "", message.NewText(message.User, t)) - token.MessageTokens(s.c, message.NewText(message.User, ""))
}

// retryConflicts bounds how often an append retries on a moving tail.
const retryConflicts = 50

// errTooManyConflicts is transient: the writers move on, a retry succeeds.
var errTooManyConflicts = fmt.Errorf("%w: mneme: too many concurrent writers on one thread", store.ErrUnavailable)

func now() time.Time { return time.Now().UTC() }

// goStateJob runs f as a background job that reports to ts: ts stays
// pinned (neither evicted nor replaced) until f returns. The caller holds a
// pin on ts.
func (m *Engine) goStateJob(ts *threadState, f func()) {
	m.pinAgain(ts)
	m.goJob(func() {
		defer m.unpin(ts)
		f()
	})
}

// goJob runs f as a background job the Engine owns: Close waits for it,
// RunningJobs counts it.
func (m *Engine) goJob(f func()) {
	m.jobs.Add(1)
	m.running.Add(1)
	go func() {
		defer m.jobs.Done()
		defer m.running.Add(-1)
		f()
	}()
}
