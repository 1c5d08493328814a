package embed

import "sort"

// RRFK is the usual reciprocal-rank-fusion constant: an entry ranked r
// (from 1) in a list adds 1/(RRFK+r) to its score (Cormack et al., 2009).
const RRFK = 60

// Fused is one entry of a ranking merged by Fuse.
type Fused[T any] struct {
	// Item is the entry as the text ranking holds it, or as the vector
	// ranking does when the text ranking lacks it.
	Item T
	// Score is the sum of 1/(k+rank) over the rankings holding the entry.
	Score float64
	// TextRank is the entry's rank (from 1) in the text ranking; 0 when
	// only the vector ranking holds it.
	TextRank int
}

// Fuse merges a full-text ranking and a vector-similarity ranking by
// reciprocal rank fusion, for hybrid search: entries are the same when key
// says so, and each scores the sum of 1/(k+rank) over the rankings that
// hold it. The result holds every entry once, best first: by score, then
// entries of the text ranking before the others, then by text rank; what
// is still tied keeps its first appearance (text ranking, then vector
// ranking). Callers cut it to their limit after dropping what they must.
func Fuse[T any](text, vec []T, key func(T) string, k int) []Fused[T] {
	by := make(map[string]*Fused[T], len(text)+len(vec))
	all := make([]*Fused[T], 0, len(text)+len(vec))
	for i, it := range text {
		f := &Fused[T]{Item: it, Score: 1 / float64(k+i+1), TextRank: i + 1}
		by[key(it)] = f
		all = append(all, f)
	}
	for i, it := range vec {
		if f := by[key(it)]; f != nil {
			f.Score += 1 / float64(k+i+1)
			continue
		}
		f := &Fused[T]{Item: it, Score: 1 / float64(k+i+1)}
		by[key(it)] = f
		all = append(all, f)
	}
	sortFused(all)
	out := make([]Fused[T], len(all))
	for i, f := range all {
		out[i] = *f
	}
	return out
}

// FuseScores merges a full-text ranking and a vector ranking by their
// scores, for hybrid search with an embedder of unknown quality: an entry
// scores its text score over the best one (1 for the top full-text hit),
// plus vecWeight times how far its cosine similarity is above minSim, as a
// share of the way to 1. A vector entry under minSim counts for nothing: it
// neither lifts a full-text entry nor enters alone. Unlike rank fusion,
// this keeps the full-text ranking's margins, so similarity reorders only
// entries whose words score alike, and enters alone only beside weak
// full-text hits. The order and the ties are those of Fuse.
func FuseScores[T any](text, vec []T, key func(T) string, score func(T) float64, minSim, vecWeight float64) []Fused[T] {
	by := make(map[string]*Fused[T], len(text)+len(vec))
	all := make([]*Fused[T], 0, len(text)+len(vec))
	top := 0.0
	for _, it := range text {
		top = max(top, score(it))
	}
	for i, it := range text {
		s := 1.0
		if top > 0 {
			s = score(it) / top
		}
		f := &Fused[T]{Item: it, Score: s, TextRank: i + 1}
		by[key(it)] = f
		all = append(all, f)
	}
	for _, it := range vec {
		sim := score(it)
		if sim < minSim || minSim >= 1 {
			continue
		}
		lift := vecWeight * (sim - minSim) / (1 - minSim)
		if f := by[key(it)]; f != nil {
			f.Score += lift
			continue
		}
		f := &Fused[T]{Item: it, Score: lift}
		by[key(it)] = f
		all = append(all, f)
	}
	sortFused(all)
	out := make([]Fused[T], len(all))
	for i, f := range all {
		out[i] = *f
	}
	return out
}

func sortFused[T any](all []*Fused[T]) {
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].Score != all[j].Score {
			return all[i].Score > all[j].Score
		}
		ti, tj := all[i].TextRank, all[j].TextRank
		if (ti == 0) != (tj == 0) {
			return ti != 0
		}
		return ti < tj
	})
}
