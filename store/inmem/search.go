package inmem

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

const maxLimit = 1000

// Search implements store.Archive: BM25 (fulltext.ParsedQuery.Rank) over the
// searched thread's own index, or every thread of the tenant, with the
// statistics of that scope: the cost is that of the scope, and scores
// reveal nothing of other tenants.
func (s *Store) Search(ctx context.Context, tenantID string, q store.SearchQuery) ([]store.Hit, error) {
	if err := backend.CheckSearch(tenantID, q); err != nil {
		return nil, err
	}
	pq, err := fulltext.ParseQuery(q.Text)
	if err != nil || pq.Empty() {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, maxLimit)

	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	t := s.tenants[tenantID]
	if t == nil {
		return nil, nil
	}
	var scope []*thread
	if q.Thread != "" {
		if th := t.threads[q.Thread]; th != nil {
			scope = append(scope, th)
		}
	} else {
		for _, th := range t.threads {
			scope = append(scope, th)
		}
		sort.Slice(scope, func(i, j int) bool { return scope[i].info.ID < scope[j].info.ID })
	}
	// The candidates, thread by thread in seq order, counted from the
	// postings (fulltext.Tally.AddPostings): their terms are not read.
	type cand struct {
		th  *thread
		seq int64
	}
	var (
		cands []cand
		n     int
	)
	tally := pq.Tally()
	for _, th := range scope {
		n += int(th.info.Messages)
		var keepSeq func(int64) bool
		if filtered(q) {
			keepSeq = func(seq int64) bool { return keep(q, th.events[seq-1]) }
		}
		seqs, err := tally.AddPostings(th, keepSeq) // never fails: the terms are at hand
		if err != nil {
			return nil, err
		}
		for _, seq := range seqs {
			cands = append(cands, cand{th, seq})
		}
	}
	var hits []store.Hit
	for r := range tally.Ranked(n) {
		if len(hits) == limit {
			break
		}
		c := cands[r.Index]
		d := c.th.docs[c.seq-1]
		if !pq.MatchesVerbatim(d.text) {
			continue
		}
		se := c.th.events[c.seq-1]
		hits = append(hits, store.Hit{
			Thread: c.th.info.ID, Ref: se.ev.Ref, Seq: se.ev.Seq,
			Role: se.role, Tool: se.tool, At: se.ev.At,
			Snippet: fulltext.Snippet(d.text, pq, 0),
			Score:   r.Score,
		})
	}
	return hits, nil
}

// filtered reports whether q filters the scope's messages.
func filtered(q store.SearchQuery) bool {
	return q.Role != "" || q.Tool != "" || q.FromSeq > 0 || q.ToSeq > 0 || !q.Since.IsZero() || !q.Until.IsZero()
}

func keep(q store.SearchQuery, se storedEvent) bool {
	switch {
	case q.Role != "" && se.role != q.Role,
		q.Tool != "" && se.tool != q.Tool,
		q.FromSeq > 0 && se.ev.Seq < q.FromSeq,
		q.ToSeq > 0 && se.ev.Seq > q.ToSeq,
		!q.Since.IsZero() && se.ev.At.Before(q.Since),
		!q.Until.IsZero() && se.ev.At.After(q.Until):
		return false
	}
	return true
}

func memKey(ns []string, key string) string { return backend.JoinNamespace(ns) + "\x00" + key }

func copyItem(it *store.Memory) store.Memory {
	c := *it
	c.Namespace = append([]string(nil), it.Namespace...)
	c.Value = append(json.RawMessage(nil), it.Value...)
	return c
}

// purge drops the tenant's expired memories; the caller holds the write lock.
func (t *tenant) purge(now time.Time) {
	for k, it := range t.memories {
		if backend.Expired(it.Expires, now) {
			delete(t.memories, k)
		}
	}
}

// PutMemory implements store.Memories.
func (s *Store) PutMemory(ctx context.Context, tenantID string, it store.Memory) (store.Memory, error) {
	if err := backend.CheckItem(tenantID, it); err != nil {
		return store.Memory{}, err
	}
	if it.Value == nil {
		return store.Memory{}, fmt.Errorf("%w: memory value is empty", store.ErrInvalid)
	}
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Memory{}, errClosed
	}
	t := s.tenant(tenantID, true)
	t.purge(now)
	k := memKey(it.Namespace, it.Key)
	stored := copyItem(&it)
	stored.Score = 0
	stored.Created, stored.Updated = now, now
	if old := t.memories[k]; old != nil {
		stored.Created = old.Created
	}
	if !stored.Expires.IsZero() {
		stored.Expires = stored.Expires.UTC().Round(0)
	}
	t.memories[k] = &stored
	return copyItem(&stored), nil
}

// GetMemory implements store.Memories.
func (s *Store) GetMemory(ctx context.Context, tenantID string, namespace []string, key string) (store.Memory, error) {
	if err := backend.CheckItemRef(tenantID, namespace, key); err != nil {
		return store.Memory{}, err
	}
	now := s.clock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.Memory{}, errClosed
	}
	t := s.tenants[tenantID]
	if t == nil {
		return store.Memory{}, store.ErrNotFound
	}
	it := t.memories[memKey(namespace, key)]
	if it == nil || backend.Expired(it.Expires, now) {
		return store.Memory{}, store.ErrNotFound
	}
	return copyItem(it), nil
}

// DeleteMemory implements store.Memories.
func (s *Store) DeleteMemory(ctx context.Context, tenantID string, namespace []string, key string) error {
	if err := backend.CheckItemRef(tenantID, namespace, key); err != nil {
		return err
	}
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	t := s.tenants[tenantID]
	if t == nil {
		return store.ErrNotFound
	}
	t.purge(now)
	k := memKey(namespace, key)
	if t.memories[k] == nil {
		return store.ErrNotFound
	}
	delete(t.memories, k)
	return nil
}

// SearchMemory implements store.Memories.
func (s *Store) SearchMemory(ctx context.Context, tenantID string, q store.MemoryQuery) ([]store.Memory, error) {
	filter, err := backend.CheckMemoryQuery(tenantID, q)
	if err != nil {
		return nil, err
	}
	var pq fulltext.ParsedQuery
	if q.Text != "" {
		if pq, err = fulltext.ParseQuery(q.Text); err != nil || pq.Empty() {
			return nil, err
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, maxLimit)
	now := s.clock()
	prefix := backend.JoinNamespace(q.Prefix)

	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	t := s.tenants[tenantID]
	if t == nil {
		return nil, nil
	}
	var items []store.Memory
	for k, it := range t.memories {
		if strings.HasPrefix(k, prefix) && !backend.Expired(it.Expires, now) {
			items = append(items, copyItem(it))
		}
	}
	if q.Text != "" {
		items = rankMemories(items, pq)
	}
	var out []store.Memory
	for _, it := range items {
		if !filter.Match(it.Value) {
			continue
		}
		out = append(out, it)
	}
	if q.Text == "" {
		sort.Slice(out, func(i, j int) bool { return newer(out[i], out[j]) })
	}
	if q.Offset >= len(out) {
		return nil, nil
	}
	out = out[q.Offset:]
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func newer(a, b store.Memory) bool {
	if !a.Updated.Equal(b.Updated) {
		return a.Updated.After(b.Updated)
	}
	return memKey(a.Namespace, a.Key) < memKey(b.Namespace, b.Key)
}

// rankMemories keeps the items matching pq, best first, Score set; the BM25
// statistics are those of the items under the searched prefix.
func rankMemories(items []store.Memory, pq fulltext.ParsedQuery) []store.Memory {
	texts := make([]string, len(items))
	toks := make([][]string, len(items))
	total := 0
	for i, it := range items {
		texts[i] = backend.MemoryText(it.Key, it.Value)
		toks[i] = fulltext.IndexTerms(texts[i])
		total += len(toks[i])
	}
	N := len(items)
	if N == 0 {
		return nil
	}
	avgdl := float64(total) / float64(N)
	tf := make([][]int, len(pq.Terms))
	df := make([]int, len(pq.Terms))
	for j, term := range pq.Terms {
		tf[j] = make([]int, N)
		for i := range items {
			if n := fulltext.PhraseCount(toks[i], term.Tokens); n > 0 {
				tf[j][i] = n
				df[j]++
			}
		}
	}
	hasReq := len(pq.Required()) > 0
	var out []store.Memory
	for i, it := range items {
		matched, ok := false, true
		var score float64
		for j, term := range pq.Terms {
			if term.Required && tf[j][i] == 0 {
				ok = false
			}
			matched = matched || tf[j][i] > 0
			score += fulltext.BM25(tf[j][i], len(toks[i]), df[j], N, avgdl)
		}
		if !ok || (!hasReq && !matched) || !pq.MatchesVerbatim(texts[i]) {
			continue
		}
		it.Score = score
		out = append(out, it)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return newer(out[i], out[j])
	})
	return out
}

// DeleteNamespace implements store.Memories. The prefix must not be empty.
func (s *Store) DeleteNamespace(ctx context.Context, tenantID string, prefix []string) (int, error) {
	if err := backend.CheckScope(tenantID, "-"); err != nil {
		return 0, err
	}
	if err := backend.CheckNamespace(prefix, false); err != nil {
		return 0, err
	}
	now := s.clock()
	p := backend.JoinNamespace(prefix)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	t := s.tenants[tenantID]
	if t == nil {
		return 0, nil
	}
	t.purge(now)
	n := 0
	for k := range t.memories {
		if strings.HasPrefix(k, p) {
			delete(t.memories, k)
			n++
		}
	}
	return n, nil
}
