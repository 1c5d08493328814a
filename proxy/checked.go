package proxy

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"sync"

	"github.com/mnemehq/mneme/message"
)

// A resend client's body is the previous one's and a step more: its
// messages were checked whole (checkBody) on the previous request.
// checkedSet.check checks only what was not: the elements of "messages" that
// were part of a body that passed are each a JSON value of bounded depth
// and valid text, whatever surrounds them, so the body passes when the body
// with each of them replaced by 0 passes (a value in place of a value adds
// no member to any object, and an element of the top-level "messages"
// array always sits at the same depth). A body that fails is checked whole
// again, for the error checkBody gives. FuzzCheckedBody compares it
// with checkBody.

// checkedBytes bounds the elements a set keeps, per generation, unless
// its limit says otherwise.
const checkedBytes = 32 << 20

// checkedSet remembers message elements of bodies that passed checkBody,
// by their bytes. Safe for concurrent use.
type checkedSet struct {
	hash  func([]byte) uint64
	limit int // bytes per generation; 0: checkedBytes

	mu       sync.Mutex
	cur, old map[checkedKey][]byte
	size     int
}

// checkedKey scopes an element to the tenant whose body carried it: how
// fast a body is checked says nothing about what another tenant sent.
type checkedKey struct {
	tenant string
	h      uint64
}

// newCheckedSet returns a set that hashes elements with hash: the
// proxy's message cache's (message.Cache.Hash), so that the decoder takes
// each element's hash from the check (message.Elem) instead of hashing it
// again. nil hashes with a seed of the set's own.
func newCheckedSet(hash func([]byte) uint64) *checkedSet {
	if hash == nil {
		seed := maphash.MakeSeed()
		hash = func(b []byte) uint64 { return maphash.Bytes(seed, b) }
	}
	return &checkedSet{hash: hash, cur: map[checkedKey][]byte{}}
}

func (c *checkedSet) has(tenant string, elem message.Elem) bool {
	k := checkedKey{tenant, elem.Hash}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cur[k]; ok {
		return bytes.Equal(e, elem.Raw)
	}
	e, ok := c.old[k]
	if !ok || !bytes.Equal(e, elem.Raw) {
		return false
	}
	c.keepLocked(k, e)
	return true
}

func (c *checkedSet) keep(tenant string, elems []message.Elem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range elems {
		k := checkedKey{tenant, e.Hash}
		if _, ok := c.cur[k]; !ok {
			c.keepLocked(k, bytes.Clone(e.Raw))
		}
	}
}

func (c *checkedSet) keepLocked(k checkedKey, e []byte) {
	c.cur[k] = e
	c.size += len(e) + 64
	if c.size > cmp.Or(c.limit, checkedBytes) {
		c.old, c.cur, c.size = c.cur, map[checkedKey][]byte{}, 0
	}
}

// check is checkBody(body), reusing the elements of tenant's bodies c
// keeps; when it split a body that passed, it also returns its fields
// (what parseChecked returns), with the object elements of "messages"
// and their hashes in o.elems.
func (c *checkedSet) check(tenant string, body []byte) (*object, error) {
	if c == nil {
		return nil, checkBody(body)
	}
	o, elems, spans := messageElems(body, c.hash)
	if elems == nil {
		return nil, checkBody(body)
	}
	o.elems = elems
	known := make([]int, 0, 2*len(elems)) // spans of known elements
	var fresh []message.Elem
	for i, e := range elems {
		if c.has(tenant, e) {
			known = append(known, spans[i][0], spans[i][1])
		} else {
			fresh = append(fresh, e)
		}
	}
	if len(known) == 0 {
		if err := checkBody(body); err != nil {
			return nil, err
		}
		c.keep(tenant, elems)
		return o, nil
	}
	reduced := make([]byte, 0, len(body)-sumSpans(known)+len(known))
	at := 0
	for i := 0; i < len(known); i += 2 {
		reduced = append(reduced, body[at:known[i]]...)
		reduced = append(reduced, '0')
		at = known[i+1]
	}
	reduced = append(reduced, body[at:]...)
	if checkBody(reduced) != nil {
		return nil, checkBody(body) // checkBody's own error (or none)
	}
	c.keep(tenant, fresh)
	return o, nil
}

func sumSpans(spans []int) int {
	n := 0
	for i := 0; i < len(spans); i += 2 {
		n += spans[i+1] - spans[i]
	}
	return n
}

// messageElems returns the body's fields and the elements of its
// top-level "messages" array that are objects, hashed by hash, and where
// each is in body; nil when the body's fields do not split
// (parseObjectSplit) or it has no such array. It does not validate: check
// validates what it finds in context.
func messageElems(body []byte, hash func([]byte) uint64) (*object, []message.Elem, [][2]int) {
	o, spans, err := parseObjectSplit(body, "messages")
	if err != nil || len(spans) == 0 {
		return nil, nil, nil
	}
	elems := make([]message.Elem, 0, len(spans))
	objs := spans[:0]
	for _, sp := range spans {
		if body[sp[0]] == '{' {
			raw := body[sp[0]:sp[1]]
			elems = append(elems, message.Elem{Raw: raw, Hash: hash(raw)})
			objs = append(objs, sp)
		}
	}
	if len(elems) == 0 {
		return nil, nil, nil
	}
	return o, elems, objs
}
