package recall

import (
	"context"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/store"
)

// Indexer embeds new messages in the background, off the request path:
// Add queues message events without blocking (a full queue drops them and
// counts it: search then finds them by BM25 only), Run embeds them in
// batches and stores the vectors. A failed batch is logged and retried
// later with exponential backoff, up to MaxAttempts.
//
// Run must have an owner that waits for it (an errgroup, or a goroutine
// joined at shutdown); it returns when its context ends.
type Indexer struct {
	vectors  store.Vectors
	embedder embed.Embedder
	log      *slog.Logger
	cfg      IndexerConfig
	queue    chan job

	mu      sync.Mutex
	retry   []job // parked after a failure, oldest first
	pending int   // queued or being embedded (retries included)
	stats   IndexerStats
}

// IndexerConfig tunes an Indexer; zero fields take the defaults.
type IndexerConfig struct {
	Queue        int           // queued messages at most (default 4096)
	Batch        int           // texts per embedding call (default 32)
	MaxAttempts  int           // tries per message before giving up (default 5)
	RetryAfter   time.Duration // first retry delay, doubled each time (default 10 s)
	MaxTextBytes int           // a message's text is cut to this (default 8192)
	Logger       *slog.Logger  // default slog.Default()
}

// IndexerStats counts what an Indexer did.
type IndexerStats struct {
	Indexed  int64 `json:"indexed"`  // messages whose vector was stored
	Dropped  int64 `json:"dropped"`  // not queued (full) or given up after MaxAttempts
	Failures int64 `json:"failures"` // failed embedding or storing attempts (batches)
	Retrying int   `json:"retrying"` // parked for a retry now
}

type job struct {
	tenant, ref, text string
	attempts          int
	notBefore         time.Time
}

// NewIndexer returns an Indexer that stores vectors from e in v.
func NewIndexer(v store.Vectors, e embed.Embedder, cfg IndexerConfig) *Indexer {
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 32
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 10 * time.Second
	}
	if cfg.MaxTextBytes <= 0 {
		cfg.MaxTextBytes = 8192
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Indexer{vectors: v, embedder: e, log: log, cfg: cfg, queue: make(chan job, cfg.Queue)}
}

// Add queues the message events of evs (as stored: with refs) for
// embedding. It never blocks; it returns how many it queued.
func (ix *Indexer) Add(tenant string, evs ...store.Event) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind != store.KindMessage || ev.Message == nil || ev.Ref == "" {
			continue
		}
		text := clipText(ev.Message.PlainText(), ix.cfg.MaxTextBytes)
		if text == "" {
			continue
		}
		ix.mu.Lock()
		select {
		case ix.queue <- job{tenant: tenant, ref: ev.Ref, text: text}:
			ix.pending++
			n++
		default:
			ix.stats.Dropped++
		}
		ix.mu.Unlock()
	}
	return n
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Stats returns the counters so far.
func (ix *Indexer) Stats() IndexerStats {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	st := ix.stats
	st.Retrying = len(ix.retry)
	return st
}

// Run embeds queued messages until ctx ends; it returns nil then.
func (ix *Indexer) Run(ctx context.Context) error {
	tick := time.NewTicker(min(ix.cfg.RetryAfter, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case j := <-ix.queue:
			batch := []job{j}
		fill:
			for len(batch) < ix.cfg.Batch {
				select {
				case j := <-ix.queue:
					batch = append(batch, j)
				default:
					break fill
				}
			}
			ix.process(ctx, batch)
		case <-tick.C:
			if due := ix.dueRetries(time.Now()); len(due) > 0 {
				ix.process(ctx, due)
			}
		}
	}
}

// Flush waits until every message queued so far is indexed or given up on,
// including parked retries; ctx bounds the wait.
func (ix *Indexer) Flush(ctx context.Context) error {
	for {
		ix.mu.Lock()
		idle := ix.pending == 0 && len(ix.retry) == 0
		ix.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (ix *Indexer) dueRetries(now time.Time) []job {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var due, keep []job
	for _, j := range ix.retry {
		if !j.notBefore.After(now) && len(due) < ix.cfg.Batch {
			due = append(due, j)
		} else {
			keep = append(keep, j)
		}
	}
	ix.retry = keep
	ix.pending += len(due) // in flight again: Flush waits for them
	return due
}

// process embeds and stores one batch, tenant by tenant.
func (ix *Indexer) process(ctx context.Context, batch []job) {
	byTenant := map[string][]job{}
	var order []string
	for _, j := range batch {
		if byTenant[j.tenant] == nil {
			order = append(order, j.tenant)
		}
		byTenant[j.tenant] = append(byTenant[j.tenant], j)
	}
	for _, tenant := range order {
		jobs := byTenant[tenant]
		err := ix.index(ctx, tenant, jobs)
		ix.mu.Lock()
		if err == nil {
			ix.stats.Indexed += int64(len(jobs))
		} else if ctx.Err() == nil {
			ix.stats.Failures++
			given := 0
			for _, j := range jobs {
				j.attempts++
				if j.attempts >= ix.cfg.MaxAttempts {
					ix.stats.Dropped++
					given++
					continue
				}
				j.notBefore = time.Now().Add(ix.cfg.RetryAfter << (j.attempts - 1))
				if len(ix.retry) >= ix.cfg.Queue { // bounded: drop the oldest
					ix.retry = ix.retry[1:]
					ix.stats.Dropped++
				}
				ix.retry = append(ix.retry, j)
			}
			ix.log.Warn("recall: embedding failed; will retry", "tenant", tenant, "messages", len(jobs), "given_up", given, "err", err)
		}
		ix.pending -= len(jobs)
		ix.mu.Unlock()
	}
}

func (ix *Indexer) index(ctx context.Context, tenant string, jobs []job) error {
	texts := make([]string, len(jobs))
	for i, j := range jobs {
		texts[i] = j.text
	}
	vs, err := ix.embedder.Embed(ctx, texts)
	if err != nil {
		return err
	}
	if len(vs) != len(jobs) {
		return embed.ErrEmbed
	}
	model := ix.embedder.Model()
	out := make([]store.Vector, len(jobs))
	for i, j := range jobs {
		out[i] = store.Vector{Ref: j.ref, Model: model, V: vs[i]}
	}
	return ix.vectors.PutVectors(ctx, tenant, out)
}
