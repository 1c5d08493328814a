package mneme

import (
	"context"
	"strings"
	"sync"

	"github.com/mnemehq/mneme/memory"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/token"
)

// The archive and long-term memory, as the engine wires them: one Recall
// (BM25, hybrid when an embedder is configured), one memory store, and the
// background indexer that embeds new messages off the request path.

// startRecall builds the recall and memory services and, when an embedder is
// configured and the store keeps vectors, starts the indexer under the
// Engine's background context (Close waits for it).
func (m *Engine) startRecall() {
	vs, _ := store.As[store.Vectors](m.store)
	m.recall = &recall.Recall{Store: m.store, Logger: m.log}
	if m.cfg.Embedder != nil && vs != nil {
		m.recall.Vectors, m.recall.Embedder = vs, m.cfg.Embedder
		m.indexer = recall.NewIndexer(vs, m.cfg.Embedder, recall.IndexerConfig{Logger: m.log})
		m.goJob(func() { _ = m.indexer.Run(m.bg) })
	}
	m.memory = memory.New(m.store, memory.Options{Embedder: m.cfg.Embedder, Logger: m.log})
}

// Recall returns the archive search the engine uses (for the proxy's and
// the API's recall tools).
func (m *Engine) Recall() *recall.Recall { return m.recall }

// Memory returns the tenant-scoped long-term memory store.
func (m *Engine) Memory() *memory.Bank { return m.memory }

// RecallHandler returns a handler for the recall and memory tools.
func (m *Engine) RecallHandler() *recall.Handler {
	return &recall.Handler{Recall: m.recall, Memory: m.memory}
}

// index queues new message events for embedding (never blocks).
func (m *Engine) index(tenant string, evs []store.Event) {
	if m.indexer != nil {
		m.indexer.Add(tenant, evs...)
	}
}

// recallCost is what the recall tools' schemas add to a request: with no
// tools of its own the request also pays the tools preamble once.
type recallCost struct {
	mu sync.Mutex
	by map[string]int // counter name -> tokens of the definitions alone
}

func (rc *recallCost) tokens(c token.Counter, requestHasTools bool) int {
	rc.mu.Lock()
	n, ok := rc.by[c.Name()]
	if !ok {
		if rc.by == nil {
			rc.by = map[string]int{}
		}
		// The largest of the shapes, so that any API's request fits.
		for _, shape := range []recall.Shape{recall.OpenAI, recall.Anthropic} {
			n = max(n, token.ToolsTokens(c, recall.Definitions(shape)))
		}
		rc.by[c.Name()] = n
	}
	rc.mu.Unlock()
	if requestHasTools {
		return n - token.ToolsPreambleTokens
	}
	return n
}

// injectMemories renders the long-term memories the policy names, for the
// memory block; called at compaction points only, so the window's prefix
// changes only there (I6).
func (t *Thread) injectMemories(ctx context.Context, ts *threadState) string {
	spec := strings.TrimSpace(ts.policy.MemoryNamespaces)
	if spec == "" || t.m.memory == nil {
		return ""
	}
	var nss [][]string
	for _, ns := range strings.Split(spec, ",") {
		if ns = strings.Trim(strings.TrimSpace(ns), "/"); ns != "" {
			nss = append(nss, strings.Split(ns, "/"))
		}
	}
	goal := ""
	if head := ts.st.Head(); len(head) > 0 {
		goal = head[len(head)-1].Msg.TextOf()
	}
	// Items that match the goal first; when none does, the newest items:
	// the policy named these namespaces because they matter to the thread.
	limit := max(200, ts.st.Budget()/20)
	text, err := memory.Inject(ctx, t.m.memory, t.tenant, nss, firstWords(goal, 32), limit)
	if err == nil && text == "" {
		text, err = memory.Inject(ctx, t.m.memory, t.tenant, nss, "", limit)
	}
	if err != nil {
		t.m.log.Warn("memory injection skipped", "tenant", t.tenant, "thread", t.id, "err", err)
		return ""
	}
	return text
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

// FlushIndex waits until every queued message is embedded (or given up on):
// for tests and orderly shutdown. Without an embedder it returns at once.
func (m *Engine) FlushIndex(ctx context.Context) error {
	if m.indexer == nil {
		return nil
	}
	return m.indexer.Flush(ctx)
}
