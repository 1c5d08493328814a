package postgres

import (
	"encoding/binary"
	"strings"
	"sync"
)

// groupArgs are groupSQL's arguments for one group, encoded in
// PostgreSQL's binary array format into one buffer that is reused from
// group to group. Through pgx's query path, each argument was encoded into
// a buffer that pgx shrinks back to 256 bytes after every query, so each
// group's tens of kilobytes of messages and terms regrew it by doubling,
// and its columns were first gathered into slices of their own.
type groupArgs struct {
	buf    []byte
	ends   []int    // where each argument ends in buf
	values [][]byte // the arguments, slices of buf
	// pending estimates the bytes the events add to the GIN index's
	// pending list (pendingBytes).
	pending int64
}

// groupArgsCap bounds the buffers kept for reuse: a group of many large
// messages does not pin its buffer.
const groupArgsCap = 1 << 20

var groupArgsPool = sync.Pool{New: func() any { return new(groupArgs) }}

func getGroupArgs() *groupArgs {
	a := groupArgsPool.Get().(*groupArgs)
	a.buf, a.ends, a.values, a.pending = a.buf[:0], a.ends[:0], a.values[:0], 0
	return a
}

func (a *groupArgs) put() {
	if cap(a.buf) <= groupArgsCap {
		groupArgsPool.Put(a)
	}
}

// Element types' OIDs (pg_type).
const (
	oidInt2 = 21
	oidInt4 = 23
	oidInt8 = 20
	oidText = 25

	oidTSVector = 3614
)

// array starts an argument: a one-dimensional array of n elements of type
// elem (hasNull says whether some are NULL). Its elements follow.
func (a *groupArgs) array(elem uint32, n int, hasNull bool) {
	if len(a.ends) > 0 || len(a.buf) > 0 {
		a.ends = append(a.ends, len(a.buf))
	}
	if n == 0 {
		a.buf = be32(a.buf, 0, 0, elem) // no dimensions
		return
	}
	var flag uint32
	if hasNull {
		flag = 1
	}
	a.buf = be32(a.buf, 1, flag, elem, uint32(n), 1) // one dimension, from 1
}

func (a *groupArgs) int8(v int64) {
	a.buf = be32(a.buf, 8)
	a.buf = binary.BigEndian.AppendUint64(a.buf, uint64(v))
}
func (a *groupArgs) int4(v int32) { a.buf = be32(a.buf, 4, uint32(v)) }
func (a *groupArgs) int2(v int16) {
	a.buf = be32(a.buf, 2)
	a.buf = binary.BigEndian.AppendUint16(a.buf, uint16(v))
}
func (a *groupArgs) text(s string) { a.buf = append(be32(a.buf, uint32(len(s))), s...) }

// textOrNull writes s, or NULL when s is nil.
func (a *groupArgs) textOrNull(s *string) {
	if s == nil {
		a.buf = be32(a.buf, 0xffffffff) // length -1
		return
	}
	a.text(*s)
}

// done ends the last argument and returns them all, in order.
func (a *groupArgs) done() [][]byte {
	a.ends = append(a.ends, len(a.buf))
	start := 0
	for _, end := range a.ends {
		a.values = append(a.values, a.buf[start:end:end])
		start = end
	}
	return a.values
}

func be32(b []byte, vs ...uint32) []byte {
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// encodeGroup encodes batch as groupSQL's arguments: the requests (each
// numbered by its index in batch), then their events.
func (a *groupArgs) encodeGroup(batch []*appendReq) [][]byte {
	n, rows := len(batch), 0
	for _, r := range batch {
		rows += len(r.cols.seq)
	}
	a.array(oidText, n, false)
	for _, r := range batch {
		a.text(r.tenant)
	}
	a.array(oidText, n, false)
	for _, r := range batch {
		a.text(r.thread)
	}
	for _, col := range []func(*appendReq) int64{
		func(r *appendReq) int64 { return r.after },
		func(r *appendReq) int64 { return r.n },
		func(r *appendReq) int64 { return r.msgs },
		func(r *appendReq) int64 { return r.tokens },
	} {
		a.array(oidInt8, n, false)
		for _, r := range batch {
			a.int8(col(r))
		}
	}
	a.array(oidInt4, n, false)
	for i := range batch {
		a.int4(int32(i))
	}
	a.array(oidInt8, n, false)
	for _, r := range batch {
		a.int8(r.now)
	}

	a.array(oidInt4, rows, false)
	for i, r := range batch {
		for range r.cols.seq {
			a.int4(int32(i))
		}
	}
	a.eventInt8s(batch, rows, func(c *groupCols) []int64 { return c.seq })
	a.eventTexts(batch, rows, func(c *groupCols) []string { return c.kind })
	a.eventInt8s(batch, rows, func(c *groupCols) []int64 { return c.at })
	a.eventNullTexts(batch, rows, func(c *groupCols) []*string { return c.ref })
	a.eventNullTexts(batch, rows, func(c *groupCols) []*string { return c.role })
	a.eventNullTexts(batch, rows, func(c *groupCols) []*string { return c.tool })
	a.array(oidInt4, rows, false)
	for _, r := range batch {
		for _, v := range r.cols.tokens {
			a.int4(v)
		}
	}
	a.eventNullTexts(batch, rows, func(c *groupCols) []*string { return c.msg })
	a.eventNullTexts(batch, rows, func(c *groupCols) []*string { return c.d })
	a.eventTexts(batch, rows, func(c *groupCols) []string { return c.terms })
	a.array(oidInt2, rows, false)
	for _, r := range batch {
		for _, v := range r.cols.lossy {
			a.int2(v)
		}
	}
	a.array(oidTSVector, rows, false)
	for _, r := range batch {
		for _, v := range r.cols.terms {
			at := len(a.buf)
			var lexemes, lexemeBytes int
			a.buf, lexemes, lexemeBytes = appendTSVector(be32(a.buf, 0), v)
			a.pending += pendingBytes(lexemes, lexemeBytes)
			be.PutUint32(a.buf[at:], uint32(len(a.buf)-at-4))
		}
	}
	return a.done()
}

func (a *groupArgs) eventInt8s(batch []*appendReq, rows int, col func(*groupCols) []int64) {
	a.array(oidInt8, rows, false)
	for _, r := range batch {
		for _, v := range col(&r.cols) {
			a.int8(v)
		}
	}
}

func (a *groupArgs) eventTexts(batch []*appendReq, rows int, col func(*groupCols) []string) {
	a.array(oidText, rows, false)
	for _, r := range batch {
		for _, v := range col(&r.cols) {
			a.text(v)
		}
	}
}

func (a *groupArgs) eventNullTexts(batch []*appendReq, rows int, col func(*groupCols) []*string) {
	null := false
	for _, r := range batch {
		for _, v := range col(&r.cols) {
			null = null || v == nil
		}
	}
	a.array(oidText, rows, null)
	for _, r := range batch {
		for _, v := range col(&r.cols) {
			a.textOrNull(v)
		}
	}
}

// appendTSVector appends the binary form of the tsvector literal lit, as
// tsvectorrecv reads it, to b. lit is what indexed returns: quoted lexemes
// that need no escape, in PostgreSQL's order, each with its positions
// (weightless) or none. The server then takes the tsvector as it is
// instead of parsing the literal (13% of its CPU of an append, when the
// column was generated from terms). It also returns the number of
// lexemes and their bytes.
func appendTSVector(b []byte, lit string) (_ []byte, lexemes, lexemeBytes int) {
	count := len(b)
	b = be32(b, 0)
	n := uint32(0)
	for i := 0; i < len(lit); {
		if lit[i] != '\'' {
			i++
			continue
		}
		end := strings.IndexByte(lit[i+1:], '\'')
		if end < 0 {
			break
		}
		b = append(append(b, lit[i+1:i+1+end]...), 0)
		n++
		lexemeBytes += end
		i += end + 2
		npos := len(b)
		b = append(b, 0, 0)
		if i >= len(lit) || lit[i] != ':' {
			continue
		}
		np := uint16(0)
		for i++; ; i++ {
			p := 0
			for ; i < len(lit) && '0' <= lit[i] && lit[i] <= '9'; i++ {
				p = p*10 + int(lit[i]-'0')
			}
			b = be.AppendUint16(b, uint16(p))
			np++
			if i >= len(lit) || lit[i] != ',' {
				break
			}
		}
		be.PutUint16(b[npos:], np)
	}
	be.PutUint32(b[count:], n)
	return b, int(n), lexemeBytes
}
