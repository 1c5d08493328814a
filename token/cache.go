package token

import (
	"encoding/binary"
	"hash/maphash"
	"sync"

	"github.com/mnemehq/mneme/message"
)

// DefaultCacheSize is the number of counts a Cache made by NewCache keeps:
// some 40 bytes each, so about 10 MB at most.
const DefaultCacheSize = 1 << 18

// Cache remembers MessageTokens per (counter, message identity), so that
// counting a thread again costs a map lookup per unchanged message. It is
// safe for concurrent use; the zero value is a cache of DefaultCacheSize.
//
// Memory is bounded with two generations: entries go into the current
// generation; when it holds half the size, it becomes the old generation
// (the previous old one is dropped) and a new one starts. A hit in the old
// generation is copied to the current one, so what is still in use
// survives; at most size entries are held.
//
// An entry is keyed by a 128-bit hash of (counter, key), not by the key
// itself: a map of strings is a pointer per entry, which every garbage
// collection marks again (a full cache of 262,144 refs was about 10 ms of
// each collection's marking, and the requests a collection overlaps wait
// for it); a map of hashes has no pointers, and the collector skips it.
// Two keys share an entry only if both their seeded 64-bit hashes collide.
type Cache struct {
	mu       sync.RWMutex
	size     int
	cur, old map[cacheKey]int
}

// cacheKey is the 128-bit hash of a (counter, key) pair.
type cacheKey struct{ a, b uint64 }

var keySeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func keyOf(counter, key string) cacheKey {
	var h0, h1 maphash.Hash
	h0.SetSeed(keySeeds[0])
	h1.SetSeed(keySeeds[1])
	h0.WriteString(counter)
	h0.WriteByte(0)
	h0.WriteString(key)
	h1.WriteString(counter)
	h1.WriteByte(0)
	h1.WriteString(key)
	return cacheKey{h0.Sum64(), h1.Sum64()}
}

// NewCache returns a cache of DefaultCacheSize entries.
func NewCache() *Cache { return NewCacheSize(DefaultCacheSize) }

// NewCacheSize returns a cache that holds at most size counts (at least 2).
func NewCacheSize(size int) *Cache { return &Cache{size: max(size, 2)} }

// MessageTokens returns MessageTokens(cnt, m), computed once per counter
// and key. key is a stable identity of the message (its log ref); the
// caller promises that one key always names the same message. With key ""
// the identity is a hash of the message's content (see contentKey),
// which costs far less than counting but more than a lookup.
func (c *Cache) MessageTokens(cnt Counter, key string, m message.Message) int {
	if key == "" {
		key = contentKey(m)
	}
	k := keyOf(cnt.Name(), key)
	c.mu.RLock()
	n, ok := c.cur[k]
	c.mu.RUnlock()
	if ok {
		return n
	}
	c.mu.Lock()
	if n, ok = c.old[k]; ok {
		c.put(k, n)
	}
	c.mu.Unlock()
	if ok {
		return n
	}
	// Count outside the lock: two goroutines may count the same message at
	// once, and both get the same answer.
	n = MessageTokens(cnt, m)
	c.mu.Lock()
	c.put(k, n)
	c.mu.Unlock()
	return n
}

// put stores k under c.mu held for writing, rotating generations when the
// current one is full.
func (c *Cache) put(k cacheKey, n int) {
	if c.size == 0 {
		c.size = DefaultCacheSize
	}
	if c.cur == nil {
		c.cur = make(map[cacheKey]int)
	}
	if len(c.cur) >= c.size/2 {
		c.old, c.cur = c.cur, make(map[cacheKey]int)
	}
	c.cur[k] = n
}

// Len returns the number of entries the cache holds (an entry promoted
// from the old generation is held twice until the next rotation).
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.cur) + len(c.old)
}

// contentKey names m by a seeded 64-bit maphash of everything
// MessageTokens reads (role, name, and each part's type, texts, ids,
// arguments, raw bytes and nested content, every field length-prefixed so
// that no two messages share an encoding) together with the total length
// of those fields: two messages share a key only if they have the same
// length and collide in 64 bits. It is computed directly rather than from
// the message's JSON because encoding/json alone would cost several percent
// of counting; the seed is per process because the cache never leaves it.
func contentKey(m message.Message) string {
	h := keyHash{}
	h.h.SetSeed(seed)
	h.str(string(m.Role))
	h.str(m.Name)
	h.parts(m.Parts)
	var k [17]byte
	k[0] = '#'
	binary.LittleEndian.PutUint64(k[1:9], h.h.Sum64())
	binary.LittleEndian.PutUint64(k[9:], uint64(h.n))
	return string(k[:])
}

type keyHash struct {
	h maphash.Hash
	n int
}

func (h *keyHash) num(n int) {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(n))
	h.h.Write(buf[:])
}

func (h *keyHash) str(s string) {
	h.num(len(s))
	h.h.WriteString(s)
	h.n += len(s)
}

func (h *keyHash) parts(ps []message.Part) {
	h.num(len(ps))
	for _, p := range ps {
		h.str(string(p.Type))
		h.str(p.Text)
		h.str(p.ToolCallID)
		h.str(p.ToolName)
		h.str(p.Arguments)
		h.num(len(p.Raw))
		h.h.Write(p.Raw)
		h.n += len(p.Raw)
		h.parts(p.Content)
	}
}

var seed = maphash.MakeSeed()
