package api

import (
	"context"
	"sync"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// The forms a message takes in the window, as the API and the inspector
// name them: window.Covered splits into observed (an observation covers it)
// and catalogued (a catalogue line of the mask or archive strategy does).
const (
	FormRaw        = "raw"
	FormEvicted    = "evicted"
	FormMasked     = "masked"
	FormObserved   = "observed"
	FormCatalogued = "catalogued"
	FormDropped    = "dropped"
)

// replays keeps, per thread, a window.State replayed from the log, caught
// up on each use: the forms of every message and the memory block without
// asking the engine to compact or build anything. It mirrors how the engine
// folds the log (thread.go: catchUp, applyPolicy). The engine holds the
// same state; an accessor such as Thread.Forms would let this go.
type replays struct {
	m      *mneme.Manager
	tokens *token.Cache

	mu    sync.Mutex
	tick  uint64
	cache map[threadKey]*replay
}

type threadKey struct{ tenant, id string }

type replay struct {
	mu     sync.Mutex
	used   uint64
	st     *window.State
	policy mneme.Policy
}

// maxReplays bounds the replayed states kept in memory.
const maxReplays = 64

func newReplays(m *mneme.Manager) *replays {
	return &replays{m: m, tokens: token.NewCache(), cache: map[threadKey]*replay{}}
}

// forget drops a thread's replay (after a delete).
func (r *replays) forget(tenant, id string) {
	r.mu.Lock()
	delete(r.cache, threadKey{tenant, id})
	r.mu.Unlock()
}

// with runs f on the thread's state caught up with the log.
func (r *replays) with(ctx context.Context, tenant, id string, f func(st *window.State) error) error {
	k := threadKey{tenant, id}
	r.mu.Lock()
	r.tick++
	rp := r.cache[k]
	if rp == nil {
		rp = &replay{}
		r.cache[k] = rp
		if len(r.cache) > maxReplays {
			r.evictLocked(k)
		}
	}
	rp.used = r.tick
	r.mu.Unlock()

	rp.mu.Lock()
	defer rp.mu.Unlock()
	last, err := r.m.Store().LastSeq(ctx, tenant, id)
	if err != nil {
		return err
	}
	if rp.st == nil || rp.st.LastSeq() > last { // new, or deleted and written again
		if err := r.reset(rp, r.m.Policy()); err != nil {
			return err
		}
	}
	for rp.st.LastSeq() < last {
		evs, err := r.m.Store().Load(ctx, tenant, id, rp.st.LastSeq()+1, 2000)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Kind == store.KindPolicy {
				r.applyPolicy(rp, ev)
			}
			if err := rp.st.Apply(ev); err != nil {
				return err
			}
		}
	}
	return f(rp.st)
}

func (r *replays) evictLocked(keep threadKey) {
	var oldest threadKey
	at := ^uint64(0)
	for k, rp := range r.cache {
		if k != keep && rp.used < at {
			oldest, at = k, rp.used
		}
	}
	delete(r.cache, oldest)
}

func (r *replays) budget(p mneme.Policy) (int, token.Counter, error) {
	mod, _ := r.m.Models().Lookup(p.Model)
	ctxTokens := mod.Context
	if p.BudgetTokens > 0 {
		ctxTokens = p.BudgetTokens
	}
	c, err := token.Get(mod.Tokenizer)
	return ctxTokens - p.ReserveOutputTokens, c, err
}

func (r *replays) reset(rp *replay, p mneme.Policy) error {
	b, c, err := r.budget(p)
	if err != nil {
		return err
	}
	st, err := window.NewState(p, b, sizer{cache: r.tokens, c: c})
	if err != nil {
		return err
	}
	rp.st, rp.policy = st, p
	return nil
}

func (r *replays) applyPolicy(rp *replay, ev store.Event) {
	p, err := r.m.Policy().MergeJSON(ev.Data)
	if err != nil || p == rp.policy {
		return
	}
	b, _, err := r.budget(p)
	if err != nil {
		return
	}
	if rp.st.SetPolicy(p, b) == nil {
		rp.policy = p
	}
}

type sizer struct {
	cache *token.Cache
	c     token.Counter
}

func (s sizer) Message(key string, m message.Message) int { return s.cache.MessageTokens(s.c, key, m) }
func (s sizer) Text(t string) int                         { return s.c.Count(t) }

// formsOf names the form of every message seq the state has seen.
func formsOf(st *window.State) map[int64]string {
	kinds := map[int64]window.Strategy{}
	for _, b := range st.Blocks() {
		for q := b.From; q <= b.To; q++ {
			kinds[q] = b.Kind
		}
	}
	out := map[int64]string{}
	for seq, f := range st.FormsOf() {
		switch f {
		case window.Covered:
			if kinds[seq] == window.Observe {
				out[seq] = FormObserved
			} else {
				out[seq] = FormCatalogued
			}
		default:
			out[seq] = string(f)
		}
	}
	return out
}

// Observations returns the thread's memory block as it stands: the
// observations and catalogues with the log ranges they cover, oldest first.
// An unknown thread has none.
func (a *API) Observations(ctx context.Context, tenant, id string) ([]window.Block, error) {
	if err := store.CheckScope(tenant, id); err != nil {
		return nil, err
	}
	var out []window.Block
	err := a.replays.with(ctx, tenant, id, func(st *window.State) error {
		out = append([]window.Block{}, st.Blocks()...)
		return nil
	})
	return out, err
}

// Forms returns the form each message of the thread takes in the window
// (FormRaw, FormEvicted, FormMasked, FormObserved, FormCatalogued,
// FormDropped), by seq.
func (a *API) Forms(ctx context.Context, tenant, id string) (map[int64]string, error) {
	if err := store.CheckScope(tenant, id); err != nil {
		return nil, err
	}
	var out map[int64]string
	err := a.replays.with(ctx, tenant, id, func(st *window.State) error {
		out = formsOf(st)
		return nil
	})
	return out, err
}
