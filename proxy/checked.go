package proxy

import (
	"bytes"
	"hash/maphash"
	"sync"
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

// checkedBytes bounds the elements the set keeps, per generation.
const checkedBytes = 32 << 20

// checkedSet remembers message elements of bodies that passed checkBody,
// by their bytes. Safe for concurrent use.
type checkedSet struct {
	seed maphash.Seed

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

func newCheckedSet() *checkedSet {
	return &checkedSet{seed: maphash.MakeSeed(), cur: map[checkedKey][]byte{}}
}

func (c *checkedSet) has(tenant string, elem []byte) bool {
	k := checkedKey{tenant, maphash.Bytes(c.seed, elem)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cur[k]; ok {
		return bytes.Equal(e, elem)
	}
	e, ok := c.old[k]
	if !ok || !bytes.Equal(e, elem) {
		return false
	}
	c.keepLocked(k, e)
	return true
}

func (c *checkedSet) keep(tenant string, elems [][]byte) {
	ks := make([]checkedKey, len(elems))
	for i, e := range elems {
		ks[i] = checkedKey{tenant, maphash.Bytes(c.seed, e)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range elems {
		if _, ok := c.cur[ks[i]]; !ok {
			c.keepLocked(ks[i], bytes.Clone(e))
		}
	}
}

func (c *checkedSet) keepLocked(k checkedKey, e []byte) {
	c.cur[k] = e
	c.size += len(e) + 64
	if c.size > checkedBytes {
		c.old, c.cur, c.size = c.cur, map[checkedKey][]byte{}, 0
	}
}

// check is checkBody(body), reusing the elements of tenant's bodies c
// keeps; when it split a body
// that passed, it also returns its fields (what parseChecked returns).
func (c *checkedSet) check(tenant string, body []byte) (*object, error) {
	if c == nil {
		return nil, checkBody(body)
	}
	o, elems, spans := messageElems(body)
	if elems == nil {
		return nil, checkBody(body)
	}
	var known []int // spans of known elements
	var fresh [][]byte
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
// top-level "messages" array that are objects, and where each is in body;
// nil when the body's fields do not split (parseObjectSplit) or it has no
// such array. It does not validate: check validates what it finds in
// context.
func messageElems(body []byte) (*object, [][]byte, [][2]int) {
	o, spans, err := parseObjectSplit(body, "messages")
	if err != nil || len(spans) == 0 {
		return nil, nil, nil
	}
	elems := make([][]byte, 0, len(spans))
	objs := spans[:0]
	for _, sp := range spans {
		if body[sp[0]] == '{' {
			elems = append(elems, body[sp[0]:sp[1]])
			objs = append(objs, sp)
		}
	}
	if len(elems) == 0 {
		return nil, nil, nil
	}
	return o, elems, objs
}
