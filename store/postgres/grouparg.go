package postgres

import (
	"encoding/binary"
	"strings"

	"github.com/mnemehq/mneme/store/backend"
)

// groupArgs is one group's execution of groupSQL (or groupMoveSQL) as the
// messages of PostgreSQL's extended query protocol, Bind, Execute and
// Sync, written into one buffer that is reused from group to group and
// sent as it is (execGroup): the arguments are arrays in PostgreSQL's
// binary format, encoded in place. Through pgx's query path, each
// argument was encoded into a buffer of pgx's, and then the arguments
// were copied into its write buffer, which pgx shrinks back to 1 KB after
// every message: each group's tens of kilobytes regrew it by doubling
// (two fifths of what an append allocated).
type groupArgs struct {
	buf       []byte
	param     int // where the open argument's length is in buf, -1: none
	nparams   int // the arguments so far, written at nparamsAt by done
	nparamsAt int
	// pending estimates the bytes the events add to the GIN index's
	// pending list (pendingBytes).
	pending int64
}

// bindLenAt is where the Bind message's length is, after its type.
const bindLenAt = 1

// groupArgsCap bounds the buffers kept for reuse: a group of many large
// messages does not pin its buffer.
const groupArgsCap = 1 << 20

// groupArgsFree keeps a few groupArgs for reuse: as many as there are
// groups in flight at once, across Stores. (A sync.Pool was emptied at
// every garbage collection, which came every few groups: the buffers
// regrew by doubling, a tenth of what an append allocated.)
var groupArgsFree = make(chan *groupArgs, 4)

func getGroupArgs() *groupArgs {
	select {
	case a := <-groupArgsFree:
		a.buf, a.param, a.nparams, a.pending = a.buf[:0], -1, 0, 0
		return a
	default:
		return &groupArgs{param: -1}
	}
}

func (a *groupArgs) put() {
	if cap(a.buf) > groupArgsCap {
		return
	}
	select {
	case groupArgsFree <- a:
	default:
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

// bind starts the Bind message of an execution of the prepared statement
// stmt, in the unnamed portal, with arguments in binary format.
func (a *groupArgs) bind(stmt string) {
	a.buf = append(a.buf[:0], 'B', 0, 0, 0, 0) // its length, at bindLenAt
	a.buf = append(a.buf, 0)                   // the unnamed portal
	a.buf = append(append(a.buf, stmt...), 0)
	a.buf = be16(a.buf, 1, 1) // one format code for every argument: binary
	a.nparamsAt = len(a.buf)
	a.buf = be16(a.buf, 0) // the number of arguments, set by done
	a.param, a.nparams = -1, 0
}

// array starts an argument: a one-dimensional array of n elements of type
// elem (hasNull says whether some are NULL). Its elements follow.
func (a *groupArgs) array(elem uint32, n int, hasNull bool) {
	a.endParam()
	a.param = len(a.buf)
	a.nparams++
	a.buf = be32(a.buf, 0) // its length, set by endParam
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

// endParam sets the open argument's length.
func (a *groupArgs) endParam() {
	if a.param >= 0 {
		be.PutUint32(a.buf[a.param:], uint32(len(a.buf)-a.param-4))
		a.param = -1
	}
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

// done ends the Bind message, asking for the result in binary format,
// and appends an Execute of the unnamed portal and a Sync: the messages
// to send, in a's buffer.
func (a *groupArgs) done() []byte {
	a.endParam()
	be.PutUint16(a.buf[a.nparamsAt:], uint16(a.nparams))
	a.buf = be16(a.buf, 1, 1) // one format code for every result column: binary
	be.PutUint32(a.buf[bindLenAt:], uint32(len(a.buf)-bindLenAt))
	a.buf = append(a.buf, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0) // the unnamed portal, every row
	a.buf = append(a.buf, 'S', 0, 0, 0, 4)
	return a.buf
}

func be16(b []byte, vs ...uint16) []byte {
	for _, v := range vs {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return b
}

func be32(b []byte, vs ...uint32) []byte {
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// encodeGroup encodes an execution of the prepared statement stmt
// (groupSQL or groupMoveSQL) with batch as its arguments: the requests
// (each numbered by its index in batch), then their events.
func (a *groupArgs) encodeGroup(batch []*appendReq, stmt string) []byte {
	a.bind(stmt)
	n, rows := len(batch), 0
	for _, r := range batch {
		rows += len(r.rows)
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
		func(r *appendReq) int64 { return int64(len(r.rows)) },
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
		for range r.rows {
			a.int4(int32(i))
		}
	}
	a.eventInt8s(batch, rows, func(w *row) int64 { return w.ev.Seq })
	a.eventTexts(batch, rows, func(w *row) string { return string(w.ev.Kind) })
	a.eventInt8s(batch, rows, func(w *row) int64 { return backend.Nanos(w.ev.At) })
	a.eventNullTexts(batch, rows, func(w *row) (string, bool) { return w.ev.Ref, w.ev.Ref != "" })
	a.eventNullTexts(batch, rows, func(w *row) (string, bool) {
		if w.msg == nil {
			return "", false
		}
		return string(w.msg.Role), true
	})
	a.eventNullTexts(batch, rows, func(w *row) (string, bool) { return deref(w.tool), w.tool != nil })
	a.array(oidInt4, rows, false)
	for _, r := range batch {
		for i := range r.rows {
			a.int4(int32(r.rows[i].ev.Tokens))
		}
	}
	a.eventNullTexts(batch, rows, func(w *row) (string, bool) { return deref(w.json), w.json != nil })
	a.eventNullTexts(batch, rows, func(w *row) (string, bool) { return deref(w.data), w.data != nil })
	// terms, as indexed writes it: for a message, its scope lexemes first.
	a.array(oidText, rows, false)
	for _, r := range batch {
		for i := range r.rows {
			w := &r.rows[i]
			if w.msg == nil {
				a.text(w.terms)
				continue
			}
			h, t := r.scope[0], r.scope[1]
			n := len(h) + len(t) + 5
			if w.terms != "" {
				n += 1 + len(w.terms)
			}
			a.buf = be32(a.buf, uint32(n))
			a.buf = append(append(append(append(append(a.buf, '\''), h...), "' '"...), t...), '\'')
			if w.terms != "" {
				a.buf = append(append(a.buf, ' '), w.terms...)
			}
		}
	}
	a.array(oidInt2, rows, false)
	for _, r := range batch {
		for i := range r.rows {
			a.int2(r.rows[i].lossy)
		}
	}
	// tsv: terms in binary form. A message's scope lexemes sort first and
	// have no positions.
	a.array(oidTSVector, rows, false)
	for _, r := range batch {
		for i := range r.rows {
			w := &r.rows[i]
			at := len(a.buf)
			a.buf = be32(a.buf, 0) // the element's length
			if w.msg == nil {
				var lexemes, lexemeBytes int
				a.buf, lexemes, lexemeBytes = appendTSVector(a.buf, w.terms)
				a.pending += pendingBytes(lexemes, lexemeBytes)
			} else {
				h, t := r.scope[0], r.scope[1]
				a.buf = be32(a.buf, uint32(2+w.lexemes))
				a.buf = append(append(a.buf, h...), 0, 0, 0)
				a.buf = append(append(a.buf, t...), 0, 0, 0)
				a.buf = append(a.buf, w.tsv...)
				a.pending += pendingBytes(2+w.lexemes, len(h)+len(t)+w.lexemeBytes)
			}
			be.PutUint32(a.buf[at:], uint32(len(a.buf)-at-4))
		}
	}
	return a.done()
}

func (a *groupArgs) eventInt8s(batch []*appendReq, rows int, col func(*row) int64) {
	a.array(oidInt8, rows, false)
	for _, r := range batch {
		for i := range r.rows {
			a.int8(col(&r.rows[i]))
		}
	}
}

func (a *groupArgs) eventTexts(batch []*appendReq, rows int, col func(*row) string) {
	a.array(oidText, rows, false)
	for _, r := range batch {
		for i := range r.rows {
			a.text(col(&r.rows[i]))
		}
	}
}

// eventNullTexts writes a column of texts, NULL where col's ok is false.
func (a *groupArgs) eventNullTexts(batch []*appendReq, rows int, col func(*row) (string, bool)) {
	null := false
	for _, r := range batch {
		for i := range r.rows {
			_, ok := col(&r.rows[i])
			null = null || !ok
		}
	}
	a.array(oidText, rows, null)
	for _, r := range batch {
		for i := range r.rows {
			if v, ok := col(&r.rows[i]); ok {
				a.text(v)
			} else {
				a.buf = be32(a.buf, 0xffffffff) // NULL: length -1
			}
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
