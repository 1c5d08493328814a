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
	cur, old map[uint64][]byte
	size     int
}

func newCheckedSet() *checkedSet {
	return &checkedSet{seed: maphash.MakeSeed(), cur: map[uint64][]byte{}}
}

func (c *checkedSet) has(elem []byte) bool {
	k := maphash.Bytes(c.seed, elem)
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

func (c *checkedSet) keep(elems [][]byte) {
	ks := make([]uint64, len(elems))
	for i, e := range elems {
		ks[i] = maphash.Bytes(c.seed, e)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range elems {
		if _, ok := c.cur[ks[i]]; !ok {
			c.keepLocked(ks[i], bytes.Clone(e))
		}
	}
}

func (c *checkedSet) keepLocked(k uint64, e []byte) {
	c.cur[k] = e
	c.size += len(e) + 64
	if c.size > checkedBytes {
		c.old, c.cur, c.size = c.cur, map[uint64][]byte{}, 0
	}
}

// check is checkBody(body), reusing c's elements; when it split a body
// that passed, it also returns its fields (what parseChecked returns).
func (c *checkedSet) check(body []byte) (*object, error) {
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
		if c.has(e) {
			known = append(known, spans[i][0], spans[i][1])
		} else {
			fresh = append(fresh, e)
		}
	}
	if len(known) == 0 {
		if err := checkBody(body); err != nil {
			return nil, err
		}
		c.keep(elems)
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
	c.keep(fresh)
	return o, nil
}

func sumSpans(spans []int) int {
	n := 0
	for i := 0; i < len(spans); i += 2 {
		n += spans[i+1] - spans[i]
	}
	return n
}

// messageElems returns the body's fields and the elements of the body's top-level "messages"
// array that are objects, and where each is in body; nil when the body is
// not an object whose fields split (parseObject) or has no such array. It
// does not validate: check validates what it finds in context.
func messageElems(body []byte) (*object, [][]byte, [][2]int) {
	o, err := parseObject(body)
	if err != nil {
		return nil, nil, nil
	}
	raw := o.get("messages")
	if len(raw) == 0 || raw[0] != '[' {
		return nil, nil, nil
	}
	off := cap(body) - cap(raw) // raw is body[off:...] (parseObject slices the body)
	elems, spans := make([][]byte, 0, 64), make([][2]int, 0, 64)
	i := skipWS(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end := skipValue(raw, i)
		if end == i {
			return nil, nil, nil
		}
		if raw[i] == '{' {
			elems = append(elems, raw[i:end])
			spans = append(spans, [2]int{off + i, off + end})
		}
		i = skipWS(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
	}
	if len(elems) == 0 {
		return nil, nil, nil
	}
	return o, elems, spans
}
