package eval

import (
	"encoding/hex"
	"hash/fnv"
	"math/rand/v2"
	"sync"
)

// SeededRefs returns a source of message refs for mneme.Config.Refs drawn
// from a generator seeded with seed: they look like store.NewRef's ("m_" +
// 24 hex digits) but repeat from run to run, so a bench's token counts,
// and the compaction points they set, repeat too. Never for a server: a
// seeded ref is guessable (I8).
func SeededRefs(seed uint64) func() string {
	var s [32]byte
	for i := range 4 {
		for j := range 8 {
			s[8*i+j] = byte(seed >> (8 * j))
		}
		seed = seed*6364136223846793005 + 1442695040888963407
	}
	var mu sync.Mutex
	r := rand.NewChaCha8(s)
	return func() string {
		var b [12]byte
		mu.Lock()
		r.Read(b[:])
		mu.Unlock()
		return "m_" + hex.EncodeToString(b[:])
	}
}

// seedOf is a seed for a name.
func seedOf(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}
