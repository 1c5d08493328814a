package postgres

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mnemehq/mneme/store/backend"
)

// ginCleaner empties the pending list of the events' GIN index (events_tsv)
// from a connection of its own, beside the appends, before it is full.
//
// A GIN index with fastupdate (PostgreSQL's default) takes new entries
// into a pending list, which is merged into the index proper once it
// outgrows gin_pending_list_limit; the insert that outgrows it merges it,
// inside its statement. Here that insert is a group's: every append of
// the group waited for the merge (a quarter of the server's CPU of an
// append, in bursts of tens of milliseconds: the appends' p99), while the
// server's other cores idled. The cleaner merges the list
// (gin_clean_pending_list) once the appends of this Store have added
// about nine tenths of the limit to it, while the next groups go on
// (on a core of its own: a merge takes about a fifth more CPU this way,
// 25-27 against 19-21 µs a message by perf at 32 threads at load 7,
// where the two processes meet on the list's pages): an insert
// that finds a merge under way does not wait for it, it only adds to the
// list. If the list outgrows the limit anyway (other replicas append
// too), an insert merges it, as without the cleaner; if the role may not
// clean the index (it does not own it), the cleaner stops trying.
type ginCleaner struct {
	at    int64        // bytes added that start a cleaning
	added atomic.Int64 // bytes added since the last cleaning started

	run backend.Background // one cleaning at a time, none after close
	off atomic.Bool        // cleaning is refused: not tried again
	// ctx is the cleanings' context, cancel (by close) ends one under
	// way: a merge cut short leaves the list and index whole (the server
	// cancels an insert's merge alike), the next merge finishes it.
	ctx    context.Context
	cancel context.CancelFunc
}

// newGINCleaner returns a cleaner that starts at bytes added (0: never).
func newGINCleaner(at int64) *ginCleaner {
	c := &ginCleaner{at: at}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// ginPendingEntry is the size, in bytes, of a pending list entry beside
// its lexeme's bytes: an index tuple's header (8), the lexeme's varlena
// header (1, padded with the lexeme to 8 bytes) and its line pointer (4).
const ginPendingEntry = 8 + 1 + 4

// pendingBytes estimates the bytes a group's events add to the pending
// list: an entry per lexeme (lexemes and their bytes, from
// appendTSVector). Measured against the list's pages (pgstatginindex,
// groups of 32 messages): 1.14 times them for messages of 10 to 60
// words, 0.87 to 0.96 for 200 to 1,000 (a message's entries share a
// page, whose end then stays empty).
func pendingBytes(lexemes, lexemeBytes int) int64 {
	return int64(lexemes*(ginPendingEntry+7) + lexemeBytes)
}

// note notes n bytes added to the pending list and starts a cleaning
// when they reach c.at and none is running.
func (c *ginCleaner) note(s *Store, n int64) {
	if c.at <= 0 || c.off.Load() || c.added.Add(n) < c.at {
		return
	}
	c.run.Start(func() { c.added.Store(0) }, func() {
		_, err := s.pool.Exec(c.ctx, `SELECT gin_clean_pending_list('events_tsv'::regclass)`)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" { // insufficient privilege
			c.off.Store(true)
		}
	})
}

// close ends a cleaning under way and starts no other.
func (c *ginCleaner) close() {
	c.cancel()
	c.run.Stop()
}

// wait waits for a cleaning under way (tests).
func (c *ginCleaner) wait() { c.run.Wait() }
