package api

import "github.com/mnemehq/mneme/store"

// Scores a tenant sees are ranks, not the backend's relevance scores. A
// backend's BM25 statistics (document counts, term frequencies) may span
// every tenant of the store — SQLite's FTS5 keeps them per file — so a raw
// score could move when another tenant writes, and tell one tenant
// something of another's documents (I8). A rank-based score keeps "higher
// is better" and depends on nothing but the order of the tenant's own hits.
// docs/security.md says what remains (the order itself).

// RankScores sets each hit's Score to 1/(1+i), i its position, best first.
func RankScores(hits []store.Hit) []store.Hit {
	for i := range hits {
		hits[i].Score = rankScore(i)
	}
	return hits
}

// RankItemScores does the same for memory items found by a search.
func RankItemScores(items []store.Memory) []store.Memory {
	for i := range items {
		items[i].Score = rankScore(i)
	}
	return items
}

func rankScore(i int) float64 { return 1 / float64(1+i) }
