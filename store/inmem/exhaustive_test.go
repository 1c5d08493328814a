package inmem

import (
	"slices"
	"sort"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// SearchExhaustive is Search as it was before the postings path: the
// candidates are the documents in the postings of each term's first token
// that hold the term (PhraseCount), and a Tally counts their terms token by
// token. With everyDoc, the candidates are found by reading every document
// of the scope instead, the definition. The differential tests hold Search
// to both, and the benchmarks measure the first beside it.
func SearchExhaustive(s *Store, tenantID string, q store.SearchQuery, everyDoc bool) ([]store.Hit, error) {
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
	t := s.tenants[tenantID]
	if t == nil {
		return nil, nil
	}
	var scope []*thread
	for id, th := range t.threads {
		if q.Thread == "" || id == q.Thread {
			scope = append(scope, th)
		}
	}
	sort.Slice(scope, func(i, j int) bool { return scope[i].info.ID < scope[j].info.ID })
	type cand struct {
		th  *thread
		seq int64
	}
	var (
		cands []cand
		docs  [][]string
		n     int
	)
	for _, th := range scope {
		holds := map[int64]bool{}
		for i, d := range th.docs {
			if d == nil {
				continue
			}
			n++
			for _, term := range pq.Terms {
				if everyDoc && fulltext.PhraseCount(d.terms, term.Tokens) > 0 {
					holds[int64(i+1)] = true
				}
			}
		}
		for _, term := range pq.Terms {
			if p := th.postings[term.Tokens[0]]; p != nil && !everyDoc {
				for _, seq := range p.Docs {
					if !holds[seq] && (len(term.Tokens) == 1 || fulltext.PhraseCount(th.docs[seq-1].terms, term.Tokens) > 0) {
						holds[seq] = true
					}
				}
			}
		}
		sorted := make([]int64, 0, len(holds))
		for seq := range holds {
			if keep(q, th.events[seq-1]) {
				sorted = append(sorted, seq)
			}
		}
		slices.Sort(sorted)
		for _, seq := range sorted {
			cands = append(cands, cand{th, seq})
			docs = append(docs, th.docs[seq-1].terms)
		}
	}
	var hits []store.Hit
	for _, r := range pq.Rank(docs, n) {
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
