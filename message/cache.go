package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// A resend client sends its whole history with every request, so nearly
// every message the proxy decodes it decoded on the client's previous
// request, and nearly every message of the window it encodes it encoded
// for the previous model call. Cache remembers both, by content: a message
// object's bytes for decoding, a message's content for encoding. A hit is
// checked byte for byte (bytes.Equal, or every field the encoder reads), so
// a hash collision costs a miss, never a wrong message; what a hit returns
// is what decoding or encoding the same input returns.

// DefaultCacheBytes bounds what a Cache holds when NewCache is given 0.
const DefaultCacheBytes = 64 << 20

// Cache is a bounded cache of decoded and encoded messages, safe for
// concurrent use. The zero value is not usable; see NewCache.
type Cache struct {
	seed  maphash.Seed
	limit int // bytes per generation

	mu       sync.Mutex
	cur, old generation
}

// generation is one half of the cache: entries move from old to cur when
// used, and when cur fills, old is dropped and cur becomes old (what was not
// used during a whole generation goes).
type generation struct {
	dec  map[decKey]*decEntry
	enc  map[encKey]*encEntry
	size int
}

type decKey struct {
	scope, api string
	h          uint64
}

type encKey struct {
	scope string
	h     uint64
}

type decEntry struct {
	raw []byte
	m   Message
}

type encEntry struct {
	m   Message // a clone of the message encoded
	out []byte  // its OpenAI units, joined by commas
}

// NewCache returns a Cache holding about maxBytes of messages (their JSON
// and their decoded strings); 0 means DefaultCacheBytes.
func NewCache(maxBytes int) *Cache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	c := &Cache{seed: maphash.MakeSeed(), limit: maxBytes / 2}
	c.cur = newGeneration()
	c.old = newGeneration()
	return c
}

func newGeneration() generation {
	return generation{dec: map[decKey]*decEntry{}, enc: map[encKey]*encEntry{}}
}

// add accounts for n bytes added to cur, turning generations when it is
// full. c.mu is held.
func (c *Cache) add(n int) {
	c.cur.size += n
	if c.cur.size > c.limit {
		c.old, c.cur = c.cur, newGeneration()
	}
}

// Scoped is a Cache seen by one scope (a tenant): what one scope put in
// the cache is never a hit for another, so how fast a request is says
// nothing about what another tenant sent. A nil Cache gives a Scoped that
// caches nothing.
type Scoped struct {
	c     *Cache
	scope string
}

// For returns the cache as scope sees it.
func (c *Cache) For(scope string) Scoped { return Scoped{c, scope} }

// DecodeOpenAIMessages is DecodeOpenAIMessages (the function) through the
// cache. The messages share memory with the cache and with other callers'
// messages: they must not be modified in place.
func (c *Cache) DecodeOpenAIMessages(data []byte) ([]Message, error) {
	return c.For("").DecodeOpenAIMessages(data)
}

// DecodeAnthropicMessages is DecodeAnthropicMessages through the cache,
// with the same caveat as DecodeOpenAIMessages.
func (c *Cache) DecodeAnthropicMessages(data []byte) ([]Message, error) {
	return c.For("").DecodeAnthropicMessages(data)
}

// DecodeOpenAIMessages is Cache.DecodeOpenAIMessages within the scope.
func (sc Scoped) DecodeOpenAIMessages(data []byte) ([]Message, error) {
	return sc.DecodeOpenAIElems(data, nil)
}

// Elem is an object element of a message list that its caller has found
// already (Raw, a sub-slice of the list's data) and hashed (Cache.Hash):
// a proxy checking a body splits its "messages" and hashes each element
// for its own bookkeeping, so the decoder need not do both again.
type Elem struct {
	Raw  []byte
	Hash uint64
}

// Hash is the hash the cache keys an element's bytes by.
func (c *Cache) Hash(raw []byte) uint64 { return maphash.Bytes(c.seed, raw) }

// DecodeOpenAIElems is DecodeOpenAIMessages given elems, the object
// elements of data in order as the caller found them. An element of data
// that starts where the next of elems starts (the same memory) is taken
// to end where it ends, with its hash; any other is found and hashed as
// DecodeOpenAIMessages does. What elems say is never trusted for the
// result: a hit is still equal byte for byte to an object that decoded
// whole, and a miss decodes its bytes, so wrong elems cost misses, never
// a different message or error.
func (sc Scoped) DecodeOpenAIElems(data []byte, elems []Elem) ([]Message, error) {
	s := scanner{data: data}
	return decodeListCached(&s, decodeOpenAIMessage, sc, apiOpenAI, elems)
}

// DecodeAnthropicMessages is Cache.DecodeAnthropicMessages within the
// scope.
func (sc Scoped) DecodeAnthropicMessages(data []byte) ([]Message, error) {
	s := scanner{data: data}
	return decodeListCached(&s, decodeAnthropicMessage, sc, apiAnthropic, nil)
}

// decodeListCached is decodeList taking each element that is an object
// from the cache when its bytes are there. A miss decodes the element from
// its own copy of the bytes, so that what the cache keeps (the raw values
// a message holds are sub-slices of what it was decoded from) does not keep
// the request's body alive. Any element that does not decode alone is
// decoded in place, as decodeList does, for the same error. elems are
// elements found by the caller (DecodeOpenAIElems).
func decodeListCached(s *scanner, decode func(*scanner) (Message, error), sc Scoped, api string, elems []Elem) ([]Message, error) {
	c := sc.c
	if c == nil {
		return decodeList(s, decode)
	}
	if s.peek() != '[' {
		return nil, &DecodeError{Index: -1, Field: "messages", Msg: "want an array of messages"}
	}
	var out []Message
	if len(elems) > 0 {
		// Most often one message an element: one allocation, not a
		// doubling slice's dozen (a Message is 168 bytes).
		out = make([]Message, 0, len(elems))
	}
	idx := -1
	err := s.array(func(i int) error {
		idx = i
		if s.peek() == '{' {
			start := s.pos
			var end int
			var h uint64
			if e := nextElem(elems, s.data, start); e != nil {
				end, h = start+len(e.Raw), e.Hash
				elems = elems[1:]
			} else {
				end = skipObject(s.data, start)
				h = maphash.Bytes(c.seed, s.data[start:end])
			}
			raw := s.data[start:end]
			if m, ok := c.decoded(decKey{sc.scope, api, h}, raw); ok {
				out = append(out, m)
				s.pos = end
				return nil
			}
			own := bytes.Clone(raw)
			sub := scanner{data: own, depth: s.depth}
			if m, err := decode(&sub); err == nil && sub.pos == len(own) {
				c.keepDecoded(decKey{sc.scope, api, h}, own, m)
				out = append(out, m)
				s.pos = end
				return nil
			}
		}
		m, err := decode(s)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	if len(out) == 0 {
		out = nil // as decodeList gives an empty list
	}
	return endList(s, out, idx, err)
}

// nextElem returns elems[0] when it is the element of d starting at
// d[start]: the same memory, within d; otherwise nil, and elems[0] waits
// for the element it starts.
func nextElem(elems []Elem, d []byte, start int) *Elem {
	if len(elems) == 0 {
		return nil
	}
	e := &elems[0]
	if len(e.Raw) == 0 || len(e.Raw) > len(d)-start || &e.Raw[0] != &d[start] {
		return nil
	}
	return e
}

// skipObject returns the index after the object starting at d[i] ('{'),
// or len(d) when it does not end. It does not validate: a hit must equal,
// byte for byte, an object that decoded, and an object is self-delimiting,
// so the strict scanner would have ended it at the same place.
func skipObject(d []byte, i int) int {
	depth := 0
	for ; i < len(d); i++ {
		switch d[i] {
		case '"':
			i = skipStr(d, i) - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return len(d)
}

// skipStr returns the index after the string starting at d[i] ('"'),
// jumping from quote to quote and counting the backslashes before each.
func skipStr(d []byte, i int) int {
	for i++; i < len(d); {
		q := bytes.IndexByte(d[i:], '"')
		if q < 0 {
			return len(d)
		}
		i += q
		n := 0
		for d[i-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return i + 1
		}
		i++
	}
	return len(d)
}

func (c *Cache) decoded(k decKey, raw []byte) (Message, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.cur.dec[k]
	if e == nil {
		if e = c.old.dec[k]; e == nil || !bytes.Equal(e.raw, raw) {
			return Message{}, false
		}
		delete(c.old.dec, k)
		c.old.size -= 2 * len(e.raw)
		c.cur.dec[k] = e
		c.add(2 * len(e.raw))
		return e.m, true
	}
	if !bytes.Equal(e.raw, raw) {
		return Message{}, false
	}
	return e.m, true
}

func (c *Cache) keepDecoded(k decKey, raw []byte, m Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cur.dec[k]; ok {
		return
	}
	c.cur.dec[k] = &decEntry{raw: raw, m: m}
	// The bytes, and about as much again for the decoded strings.
	c.add(2 * len(raw))
}

// EncodeOpenAIMessages is EncodeOpenAIMessages (the function) through the
// cache: each message's OpenAI units are taken from the cache when a
// message of the same content was encoded before.
func (c *Cache) EncodeOpenAIMessages(ms []Message) (json.RawMessage, error) {
	return c.For("").EncodeOpenAIMessages(ms)
}

// AppendOpenAIMessages appends what EncodeOpenAIMessages returns to b (a
// request body being written); on error b is returned as it was given.
func (c *Cache) AppendOpenAIMessages(b []byte, ms []Message) ([]byte, error) {
	return c.For("").AppendOpenAIMessages(b, ms)
}

// EncodeOpenAIMessages is Cache.EncodeOpenAIMessages within the scope.
func (sc Scoped) EncodeOpenAIMessages(ms []Message) (json.RawMessage, error) {
	if sc.c == nil {
		return EncodeOpenAIMessages(ms)
	}
	b, err := sc.AppendOpenAIMessages(make([]byte, 0, encodedSize(ms)), ms)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// AppendOpenAIMessages is Cache.AppendOpenAIMessages within the scope.
func (sc Scoped) AppendOpenAIMessages(b []byte, ms []Message) ([]byte, error) {
	c := sc.c
	if c == nil {
		out, err := EncodeOpenAIMessages(ms)
		if err != nil {
			return b, err
		}
		return append(b, out...), nil
	}
	b0 := b
	b = append(b, '[')
	n := 0
	for i := range ms {
		m := &ms[i]
		k := encKey{sc.scope, c.hashMessage(m)}
		if out, ok := c.encoded(k, m); ok {
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = append(b, out...)
			continue
		}
		units, err := openAIUnits(*m)
		if err != nil {
			return b0, fmt.Errorf("messages[%d]: %w", i, err)
		}
		start := len(b)
		for j, u := range units {
			if n > 0 {
				b = append(b, ',')
			}
			if j == 0 {
				start = len(b)
			}
			n++
			if err := writeOpenAIUnit(&b, *m, u); err != nil {
				return b0, fmt.Errorf("messages[%d]: %w", i, err)
			}
		}
		if len(units) > 0 {
			c.keepEncoded(k, m, b[start:])
		}
	}
	return append(b, ']'), nil
}

func (c *Cache) encoded(k encKey, m *Message) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.cur.enc[k]
	if e == nil {
		if e = c.old.enc[k]; e == nil || !sameEncoding(&e.m, m) {
			return nil, false
		}
		delete(c.old.enc, k)
		c.old.size -= len(e.out)
		c.cur.enc[k] = e
		c.add(len(e.out))
	} else if !sameEncoding(&e.m, m) {
		return nil, false
	}
	return e.out, true
}

func (c *Cache) keepEncoded(k encKey, m *Message, out []byte) {
	e := &encEntry{m: m.Clone(), out: bytes.Clone(out)}
	e.m.Time, e.m.Meta = time.Time{}, nil // not encoded
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur.enc[k] = e
	// The message's strings are shared with the caller's; the encoding is
	// the cache's own.
	c.add(len(e.out))
}

// hashMessage hashes what the OpenAI encoder reads of m: everything but
// Time and Meta. Each string is hashed in one call (maphash.String runs
// at memory speed; a maphash.Hash copies what it is written in small
// blocks) and the results are mixed.
func (c *Cache) hashMessage(m *Message) uint64 {
	h := mix(0, c.str(string(m.Role)))
	h = mix(h, c.str(m.Name))
	h = c.hashWire(h, &m.Wire)
	return c.hashParts(h, m.Parts)
}

func (c *Cache) hashParts(h uint64, ps []Part) uint64 {
	h = mix(h, uint64(len(ps)))
	for i := range ps {
		p := &ps[i]
		for _, s := range [...]string{string(p.Type), p.Text, p.ImageURL, p.Detail, p.ToolCallID, p.ToolName, p.Arguments, p.Signature} {
			h = mix(h, c.str(s))
		}
		if p.IsError {
			h = mix(h, 1)
		}
		h = mix(h, maphash.Bytes(c.seed, p.Raw))
		h = c.hashWire(h, &p.Wire)
		h = c.hashParts(h, p.Content)
	}
	return h
}

func (c *Cache) hashWire(h uint64, w *Wire) uint64 {
	for _, s := range [...]string{w.API, w.Form, w.Role, w.Type} {
		h = mix(h, c.str(s))
	}
	// Map order varies: the members' count only (equality checks them).
	return mix(h, uint64(len(w.Extra))<<32|uint64(len(w.Item)))
}

func (c *Cache) str(s string) uint64 {
	if s == "" {
		return 0
	}
	return maphash.String(c.seed, s)
}

// mix folds v into h (the multiply-rotate of a 64-bit hash combiner).
func mix(h, v uint64) uint64 {
	h ^= v + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	return h*0xbf58476d1ce4e5b9 ^ h>>31
}

// sameEncoding reports whether a and b hold the same of everything the
// encoder reads (all but Time and Meta). Strings that share memory compare
// in constant time.
func sameEncoding(a, b *Message) bool {
	return a.Role == b.Role && a.Name == b.Name && sameWire(&a.Wire, &b.Wire) && sameParts(a.Parts, b.Parts)
}

func sameParts(a, b []Part) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		p, q := &a[i], &b[i]
		if p.Type != q.Type || p.Text != q.Text || p.ImageURL != q.ImageURL || p.Detail != q.Detail ||
			p.ToolCallID != q.ToolCallID || p.ToolName != q.ToolName || p.Arguments != q.Arguments ||
			p.IsError != q.IsError || p.Signature != q.Signature || !bytes.Equal(p.Raw, q.Raw) ||
			(p.Raw == nil) != (q.Raw == nil) || !sameWire(&p.Wire, &q.Wire) || !sameParts(p.Content, q.Content) {
			return false
		}
	}
	return true
}

func sameWire(a, b *Wire) bool {
	return a.API == b.API && a.Form == b.Form && a.Role == b.Role && a.Type == b.Type &&
		sameRawMap(a.Extra, b.Extra) && sameRawMap(a.Item, b.Item)
}

func sameRawMap(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) || (v == nil) != (w == nil) {
			return false
		}
	}
	return true
}

// SameContent reports whether a and b are the same message in every field
// but Time. Strings that share memory compare in constant time, so two
// messages decoded from the same bytes through a Cache compare in time
// proportional to their number of parts.
func SameContent(a, b *Message) bool {
	if len(a.Meta) != len(b.Meta) || (a.Meta == nil) != (b.Meta == nil) {
		return false
	}
	for k, v := range a.Meta {
		if w, ok := b.Meta[k]; !ok || v != w {
			return false
		}
	}
	return sameEncoding(a, b)
}
