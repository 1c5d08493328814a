package sqlite

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/mnemehq/mneme/store"
)

// Refs this store makes (NewRef). A ref names a message across its tenant
// and must say nothing of its thread, tenant, position or time
// (docs/security.md), so refs look random; a random ref in the events
// table's unique (tenant, ref) index put each message's entry on a random
// leaf: with 32 threads appending, a page more in a group's WAL frames for
// almost every message, two fifths of them (BenchmarkDurableAppend
// /sqlite/32 with refs left out of the index: the writer's time a message
// 17% lower, the rate 13-24% higher).
//
// A ref this store makes is instead a locator under a keyed permutation:
// the locator (a number this store gives once, from blocks it reserves in
// archive_state.locs) and four zero bytes, 96 bits permuted by a Feistel
// network whose round function is AES-128 under archive_state.refkey, in
// hex after "m_" as store.NewRef's. Without the key a ref is as
// unguessable as a random one: the permutation of the next locator is not
// known from this one's, and a changed ref opens to a locator with four
// zero bytes only once in 2^32. Its row's ref column holds the locator's
// key (locKey: a control character and the locator in 16 hex digits), so
// that the index's new entries sort at its end (one process's locators
// increase), and made_ref, which no index holds, the ref itself.
//
// A ref this store did not make (a caller's, another store's in an
// import) is kept as it is. No ref holds a control character
// (backend.CheckEvent), so no ref is any locator's key: the one index
// keeps refs of both kinds unique per tenant, and any ref that opens is
// taken for a locator. (A ref of another kind opens only once in 2^32, and
// then stands for a locator this store gives once in 2^64: never in
// practice.)
//
// The key is in the log's file: whoever reads the file reads the messages
// the refs name anyway.

// refRounds is the Feistel network's rounds: four make a strong
// pseudorandom permutation of a pseudorandom round function; more widen
// the margin at no cost worth counting.
const refRounds = 10

// locBlock is how many locators a reservation takes: one write
// transaction per block.
const locBlock = 4096

// refCipher permutes 96-bit blocks: a balanced Feistel network on 48-bit
// halves, round i's function being the first 6 bytes of AES(key, i || R).
type refCipher struct{ b cipher.Block }

func newRefCipher(key []byte) (refCipher, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return refCipher{}, err
	}
	return refCipher{b: b}, nil
}

// round returns round i's function of half r. buf is the AES block's
// room, one per seal or open (a block handed to the cipher's interface is
// allocated: one per round was a tenth of a made ref's cost).
func (c refCipher) round(buf *[32]byte, i int, r []byte) [6]byte {
	in, out := buf[:16], buf[16:]
	clear(in)
	in[0] = byte(i)
	copy(in[1:], r)
	c.b.Encrypt(out, in)
	var f [6]byte
	copy(f[:], out[:6])
	return f
}

// seal returns the ref of locator loc.
func (c refCipher) seal(loc uint64) string {
	var x [12]byte
	binary.BigEndian.PutUint64(x[:8], loc)
	l, r := x[:6], x[6:]
	var nl [6]byte
	buf := new([32]byte)
	for i := range refRounds {
		f := c.round(buf, i, r)
		for j := range nl {
			nl[j] = l[j] ^ f[j]
		}
		copy(l, r)
		copy(r, nl[:])
	}
	return "m_" + hex.EncodeToString(x[:])
}

// open returns the locator ref stands for, and false when ref is not one
// this key made.
func (c refCipher) open(ref string) (uint64, bool) {
	if c.b == nil || len(ref) != 26 || ref[:2] != "m_" {
		return 0, false
	}
	var x [12]byte
	for i := 2; i < len(ref); i++ {
		if d := ref[i]; (d < '0' || d > '9') && (d < 'a' || d > 'f') {
			return 0, false // upper-case digits too: not a ref this store spelled
		}
	}
	if _, err := hex.Decode(x[:], []byte(ref[2:])); err != nil {
		return 0, false
	}
	l, r := x[:6], x[6:]
	var nr [6]byte
	buf := new([32]byte)
	for i := refRounds - 1; i >= 0; i-- {
		f := c.round(buf, i, l)
		for j := range nr {
			nr[j] = r[j] ^ f[j]
		}
		copy(r, l)
		copy(l, nr[:])
	}
	if binary.BigEndian.Uint32(x[8:]) != 0 {
		return 0, false
	}
	return binary.BigEndian.Uint64(x[:8]), true
}

// refSource gives locators from blocks reserved in the log.
type refSource struct {
	mu      sync.Mutex
	next    uint64 // the next locator to give
	end     uint64 // past the block's last
	reserve func(n uint64) (end uint64, err error)
}

// NewRef implements store.RefMaker: a fresh ref of a locator this store
// gives once (see above), or store.NewRef's random one when none can be
// reserved (a read-only file, a full disk): refs of both kinds are kept
// and found.
func (s *Store) NewRef() string {
	if s.refs == nil {
		return store.NewRef()
	}
	loc, ok := s.refs.take()
	if !ok {
		return store.NewRef()
	}
	return s.opener.seal(loc)
}

var _ store.RefMaker = (*Store)(nil)

// take returns a locator, reserving a block when the last is used up.
func (rs *refSource) take() (uint64, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.next == rs.end {
		end, err := rs.reserve(locBlock)
		if err != nil {
			return 0, false
		}
		rs.next, rs.end = end-locBlock, end
	}
	loc := rs.next
	rs.next++
	return loc, true
}

// openRefs reads the log's ref key and sets up the store's locators. A
// read-only store makes none (NewRef gives random refs) but opens them.
func (s *Store) openRefs(ctx context.Context) error {
	var key string
	if err := s.w.QueryRowContext(ctx, `SELECT refkey FROM archive_state`).Scan(&key); err != nil {
		return fmt.Errorf("ref key: %w", err)
	}
	raw, err := hex.DecodeString(key)
	if err != nil || len(raw) != 16 {
		return fmt.Errorf("ref key: not 32 hex digits")
	}
	c, err := newRefCipher(raw)
	if err != nil {
		return err
	}
	s.opener = c
	if s.readOnly {
		return nil
	}
	s.refs = &refSource{reserve: func(n uint64) (uint64, error) {
		// Durable before any of the block is given: a locator given and
		// then given again after a crash would name two messages.
		var end int64
		err := s.w.QueryRowContext(context.Background(),
			`UPDATE archive_state SET locs = locs + ? RETURNING locs`, int64(n)).Scan(&end)
		return uint64(end), err
	}}
	return nil
}

// refKey returns ref's key in the ref column, and whether ref is one this
// store made: a made ref's key is its locator's (locKey), any other ref is
// its own key.
func (s *Store) refKey(ref string) (key string, made bool) {
	if loc, ok := s.opener.open(ref); ok {
		return locKey(loc), true
	}
	return ref, false
}

// locKey is the key of locator loc in the ref column: a control character
// (which no ref holds, backend.CheckEvent) and 16 hex digits, so that keys
// sort as their locators.
func locKey(loc uint64) string {
	var b [17]byte
	b[0] = 1
	const digits = "0123456789abcdef"
	for i := 16; i > 0; i-- {
		b[i] = digits[loc&15]
		loc >>= 4
	}
	return string(b[:])
}

// byRef runs find with the key in the ref column of the row of ref; when
// ref is one this store made and its key finds no row, again with ref as it
// is (a ref kept before migration 13 that happens to open: once in 2^32).
func (s *Store) byRef(ref string, find func(key string) error) error {
	key, made := s.refKey(ref)
	err := find(key)
	if made && errors.Is(err, sql.ErrNoRows) {
		err = find(ref)
	}
	return err
}
