package inmem

import (
	"context"
	"errors"
	"runtime"
	"sort"
	"sync"
	"weak"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

// Vectors are kept beside the store rather than in it, keyed by the store
// (weakly, so that a dropped store takes its vectors with it) and then by
// tenant and ref. A search computes the exact cosine against every vector
// of the tenant and model, then resolves each candidate through EventByRef:
// that drops vectors of deleted threads and supplies the hit's thread, seq
// and role, so filters mean exactly what they mean for Search.

var _ store.Vectors = (*Store)(nil)

type vecIndex struct {
	mu      sync.RWMutex
	tenants map[string]map[string]store.Vector // tenant → ref → vector
}

var (
	vecMu      sync.Mutex
	vecIndexes = map[weak.Pointer[Store]]*vecIndex{}
)

func (s *Store) vectors() *vecIndex {
	vecMu.Lock()
	defer vecMu.Unlock()
	k := weak.Make(s)
	ix := vecIndexes[k]
	if ix == nil {
		ix = &vecIndex{tenants: map[string]map[string]store.Vector{}}
		vecIndexes[k] = ix
		runtime.AddCleanup(s, func(k weak.Pointer[Store]) {
			vecMu.Lock()
			delete(vecIndexes, k)
			vecMu.Unlock()
		}, k)
	}
	return ix
}

// PutVectors implements store.Vectors.
func (s *Store) PutVectors(ctx context.Context, tenantID string, vs []store.Vector) error {
	if err := backend.CheckScope(tenantID, "-"); err != nil {
		return err
	}
	for _, v := range vs {
		if err := backend.CheckVector(v); err != nil {
			return err
		}
	}
	ix := s.vectors()
	for _, v := range vs {
		_, ev, err := s.EventByRef(ctx, tenantID, v.Ref)
		if errors.Is(err, store.ErrNotFound) || (err == nil && ev.Message == nil) {
			continue
		}
		if err != nil {
			return err
		}
		v.V = append([]float32(nil), v.V...)
		ix.mu.Lock()
		if ix.tenants[tenantID] == nil {
			ix.tenants[tenantID] = map[string]store.Vector{}
		}
		ix.tenants[tenantID][v.Ref] = v
		ix.mu.Unlock()
	}
	return nil
}

// SearchVectors implements store.Vectors.
func (s *Store) SearchVectors(ctx context.Context, tenantID string, q store.VectorQuery) ([]store.Hit, error) {
	if err := backend.CheckVectorQuery(tenantID, q); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, store.MaxVectorLimit)
	type cand struct {
		ref   string
		score float64
	}
	var cands []cand
	ix := s.vectors()
	ix.mu.RLock()
	for ref, v := range ix.tenants[tenantID] {
		if v.Model == q.Model && len(v.V) == len(q.V) {
			cands = append(cands, cand{ref, backend.Cosine(q.V, v.V)})
		}
	}
	ix.mu.RUnlock()
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return cands[i].ref < cands[j].ref
	})
	var hits []store.Hit
	for _, c := range cands {
		if len(hits) == limit {
			break
		}
		thread, ev, err := s.EventByRef(ctx, tenantID, c.ref)
		if errors.Is(err, store.ErrNotFound) {
			ix.mu.Lock()
			delete(ix.tenants[tenantID], c.ref) // its thread was deleted
			ix.mu.Unlock()
			continue
		}
		if err != nil {
			return nil, err
		}
		h := store.Hit{Thread: thread, Ref: c.ref, Seq: ev.Seq, Role: ev.Message.Role, At: ev.At, Score: c.score}
		h.Tool = s.toolOf(tenantID, thread, ev)
		if keepHit(q, h) {
			hits = append(hits, h)
		}
	}
	return hits, nil
}

// toolOf returns the tool name Search reports for the event.
func (s *Store) toolOf(tenantID, threadID string, ev store.Event) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if th := s.lookup(tenantID, threadID); th != nil && ev.Seq >= 1 && int(ev.Seq) <= len(th.events) {
		return th.events[ev.Seq-1].tool
	}
	return ""
}

func keepHit(q store.VectorQuery, h store.Hit) bool {
	switch {
	case q.Thread != "" && h.Thread != q.Thread,
		q.Role != "" && h.Role != q.Role,
		q.Tool != "" && h.Tool != q.Tool,
		q.FromSeq > 0 && h.Seq < q.FromSeq,
		q.ToSeq > 0 && h.Seq > q.ToSeq,
		!q.Since.IsZero() && h.At.Before(q.Since),
		!q.Until.IsZero() && h.At.After(q.Until):
		return false
	}
	return true
}
