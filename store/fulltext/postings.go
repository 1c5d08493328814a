package fulltext

import (
	"cmp"
	"slices"
	"sort"
)

// Searching from postings. A search's candidates are every document of the
// scope holding any term, and BM25 needs, of each, its length and each
// term's count: a Tally fed the candidates' terms (AddTerms, AddBody) reads
// every token of every candidate, most of which are no query token. A
// backend that keeps an inverted index with counts (the memory store)
// feeds it postings instead (AddPostings): the cost is the query tokens'
// postings, plus, for a phrase, the terms of the documents holding all its
// tokens. The counts are the same, so the ranking is (TestAddPostings).

// A Posting lists the documents of a scope holding one index term, in
// increasing order, with the term's count in each.
type Posting struct {
	Docs []int64
	TFs  []int32
}

// Add counts one occurrence of the term in doc, which is the last document
// added or follows it.
func (p *Posting) Add(doc int64) {
	if n := len(p.Docs); n > 0 && p.Docs[n-1] == doc {
		p.TFs[n-1]++
		return
	}
	p.Docs = append(p.Docs, doc)
	p.TFs = append(p.TFs, 1)
}

// Postings is what AddPostings reads of a scope's inverted index.
type Postings interface {
	// Posting returns the documents holding the index term tok, nil if
	// none does.
	Posting(tok string) *Posting
	// Len returns a document's length in index terms.
	Len(doc int64) int
	// Terms returns the index terms (IndexTerms) of each of docs, in
	// order: a phrase is counted on them.
	Terms(docs []int64) ([][]string, error)
}

// AddPostings adds, in increasing order, every document of ix that holds
// any term of the query and that keep (nil: every one) accepts, with the
// counts AddTerms would find in it, and returns them in the order added.
// It reads the postings of the query's tokens, the length of each document
// added, and the terms of the documents holding every token of a phrase.
// It fails only when ix.Terms does, having added nothing.
func (t *Tally) AddPostings(ix Postings, keep func(doc int64) bool) ([]int64, error) {
	terms := len(t.q.Terms)
	lists := make([]Posting, terms)
	for j, term := range t.q.Terms {
		if len(term.Tokens) == 1 {
			if p := ix.Posting(term.Tokens[0]); p != nil {
				lists[j] = *p
			}
			continue
		}
		p, err := phrasePosting(ix, term.Tokens, keep)
		if err != nil {
			return nil, err
		}
		lists[j] = p
	}
	// A merge of the lists: each step takes the smallest document at the
	// head of a list. There are at least as many as the longest list holds.
	most := 0
	for _, l := range lists {
		most = max(most, len(l.Docs))
	}
	t.lens = slices.Grow(t.lens, most)
	t.tf = slices.Grow(t.tf, most*terms)
	heads := make([]int, terms)
	docs := make([]int64, 0, most)
	for {
		doc, found := int64(0), false
		for j, l := range lists {
			if h := heads[j]; h < len(l.Docs) && (!found || l.Docs[h] < doc) {
				doc, found = l.Docs[h], true
			}
		}
		if !found {
			return docs, nil
		}
		var tf []int32 // nil: keep refuses doc
		if keep == nil || keep(doc) {
			t.begin()
			tf = t.tf[len(t.tf)-terms:]
		}
		for j, l := range lists {
			if h := heads[j]; h < len(l.Docs) && l.Docs[h] == doc {
				if tf != nil {
					tf[j] = l.TFs[h]
				}
				heads[j]++
			}
		}
		if tf != nil {
			t.lens[len(t.lens)-1] = ix.Len(doc)
			docs = append(docs, doc)
		}
	}
}

// phrasePosting returns the posting of a phrase: the documents holding
// each of its tokens, those keep accepts, counted by PhraseCount on their
// terms.
func phrasePosting(ix Postings, toks []string, keep func(doc int64) bool) (Posting, error) {
	lists := make([]*Posting, len(toks))
	for i, tok := range toks {
		if lists[i] = ix.Posting(tok); lists[i] == nil {
			return Posting{}, nil
		}
	}
	// The rarest token's documents, looked up in the others'.
	rare := 0
	for i, l := range lists {
		if len(l.Docs) < len(lists[rare].Docs) {
			rare = i
		}
	}
	at := make([]int, len(lists)) // where each list's search resumes
	var all []int64               // the documents holding every token
next:
	for _, doc := range lists[rare].Docs {
		for i, l := range lists {
			if i == rare {
				continue
			}
			rest := l.Docs[at[i]:]
			k := sort.Search(len(rest), func(k int) bool { return rest[k] >= doc })
			at[i] += k
			if k == len(rest) {
				break next // no later document holds this token either
			}
			if rest[k] != doc {
				continue next
			}
		}
		if keep == nil || keep(doc) {
			all = append(all, doc)
		}
	}
	if len(all) == 0 {
		return Posting{}, nil
	}
	terms, err := ix.Terms(all)
	if err != nil {
		return Posting{}, err
	}
	var out Posting
	for i, doc := range all {
		if n := PhraseCount(terms[i], toks); n > 0 {
			out.Docs = append(out.Docs, doc)
			out.TFs = append(out.TFs, int32(n))
		}
	}
	return out, nil
}

// Ranked returns what Rank does, best first, one at a time: a search that
// needs its first few hits does not sort every candidate. The candidates
// are scored at once; each step takes the best left from a heap.
func (t *Tally) Ranked(n int) func(yield func(Scored) bool) {
	return func(yield func(Scored) bool) {
		h := t.score(n)
		for i := len(h)/2 - 1; i >= 0; i-- {
			down(h, i)
		}
		for len(h) > 0 {
			top := h[0]
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
			down(h, 0)
			if !yield(top) {
				return
			}
		}
	}
}

// better is Rank's order: a higher score, then the earlier candidate. It
// is a total order, so that any sort gives the same ranking.
func better(a, b Scored) bool {
	if c := cmp.Compare(b.Score, a.Score); c != 0 {
		return c < 0
	}
	return a.Index < b.Index
}

// down restores the heap order (the best at the root) below i.
func down(h []Scored, i int) {
	for {
		best := i
		if l := 2*i + 1; l < len(h) && better(h[l], h[best]) {
			best = l
		}
		if r := 2*i + 2; r < len(h) && better(h[r], h[best]) {
			best = r
		}
		if best == i {
			return
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
}
