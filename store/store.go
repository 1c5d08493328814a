// Package store defines the durable thread log, the archive index over it and
// the long-term memory store: one interface that every backend (store/inmem,
// store/sqlite, store/postgres) implements and store/storetest checks.
//
// Every call is scoped by tenant (invariant I8): no method reads or writes
// outside the tenant it is given. The package imports no database driver.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mnemehq/mneme/message"
)

// Errors the backends return; the HTTP layer maps them to statuses.
var (
	// ErrConflict: Append's expected last seq is stale; reload and retry.
	ErrConflict = errors.New("store: conflict: thread changed since last read")
	// ErrNotFound: no such thread, ref or item for this tenant.
	ErrNotFound = errors.New("store: not found")
	// ErrInvalid: a malformed argument (empty tenant or thread, bad query).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrUnavailable: the store cannot take or serve the call now (disk
	// full, database file gone or replaced, connection lost); nothing was
	// written. Callers may retry later; the HTTP layer answers 503.
	ErrUnavailable = errors.New("store: unavailable")
)

// Kind is the kind of a log event.
type Kind string

// Event kinds (docs/design.md, "Words").
const (
	KindMessage   Kind = "message"   // Message is set
	KindEvicted   Kind = "evicted"   // Data: a tool result's body left the window
	KindMasked    Kind = "masked"    // Data: tool results replaced by placeholders
	KindCompacted Kind = "compacted" // Data: an observation or catalogue covering a range
	KindReflected Kind = "reflected" // Data: observations condensed into one
	KindPolicy    Kind = "policy"    // Data: the thread's policy changed
	KindNote      Kind = "note"      // Data: anything else worth keeping
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	switch k {
	case KindMessage, KindEvicted, KindMasked, KindCompacted, KindReflected, KindPolicy, KindNote:
		return true
	}
	return false
}

// Event is one entry of a thread's append-only log.
type Event struct {
	// Seq is the per-thread, gapless sequence number, starting at 1.
	Seq  int64     `json:"seq"`
	Kind Kind      `json:"kind"`
	At   time.Time `json:"at"`
	// Ref names a message event across the tenant: random and unguessable,
	// it is what placeholders cite and what mneme_read takes.
	Ref     string           `json:"ref,omitempty"`
	Message *message.Message `json:"message,omitempty"`
	// Tokens is the message's token count under the thread's tokenizer at
	// append time (0 for other kinds); ThreadInfo sums it.
	Tokens int `json:"tokens,omitempty"`
	// Data is the kind-specific payload (JSON object) for non-message events.
	Data json.RawMessage `json:"data,omitempty"`
}

// ThreadInfo summarises one thread for listings.
type ThreadInfo struct {
	ID       string    `json:"id"`
	Events   int64     `json:"events"` // = last seq
	Messages int64     `json:"messages"`
	Tokens   int64     `json:"tokens"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

// Page asks for one page of a listing. Cursor is opaque ("" = first page).
type Page struct {
	Cursor string
	Limit  int // <= 0: DefaultPageSize (50); at most MaxPageSize (1000); see Page.Size
}

// Log is the durable, append-only thread log.
type Log interface {
	// Append writes evs atomically after seq `after` (0 for a new thread):
	// they get seqs after+1, after+2, ... If the thread's last seq is not
	// `after`, nothing is written and the error is ErrConflict. Zero At
	// fields are set to now, empty Refs of message events to NewRef(). It
	// returns the events as stored.
	Append(ctx context.Context, tenant, thread string, after int64, evs []Event) ([]Event, error)
	// Load returns the thread's events with seq >= from, in order, at most
	// limit of them (limit <= 0: all). An unknown thread gives no events and
	// no error.
	Load(ctx context.Context, tenant, thread string, from int64, limit int) ([]Event, error)
	// LastSeq returns the thread's last seq, 0 for an unknown thread.
	LastSeq(ctx context.Context, tenant, thread string) (int64, error)
	// Threads lists the tenant's threads, most recently updated first.
	Threads(ctx context.Context, tenant string, p Page) (infos []ThreadInfo, next string, err error)
	// Thread returns one thread's summary, or ErrNotFound.
	Thread(ctx context.Context, tenant, thread string) (ThreadInfo, error)
	// DeleteThread removes the thread completely: its events, their archive
	// index entries and vectors. ErrNotFound if it does not exist.
	DeleteThread(ctx context.Context, tenant, thread string) error
	// EventByRef returns the message event named by ref and its thread, or
	// ErrNotFound (also when the ref belongs to another tenant).
	EventByRef(ctx context.Context, tenant, ref string) (thread string, ev Event, err error)
}

// SearchQuery is an archive search. Text is required; the rest narrow it.
type SearchQuery struct {
	Text    string
	Thread  string // "" = all the tenant's threads
	Role    message.Role
	Tool    string // tool name of tool-result messages
	FromSeq int64  // inclusive, 0 = unbounded
	ToSeq   int64  // inclusive, 0 = unbounded
	Since   time.Time
	Until   time.Time
	Limit   int // <= 0: 10
}

// Hit is one archive search result, best first.
type Hit struct {
	Thread  string       `json:"thread"`
	Ref     string       `json:"ref"`
	Seq     int64        `json:"seq"`
	Role    message.Role `json:"role"`
	Tool    string       `json:"tool,omitempty"`
	At      time.Time    `json:"at"`
	Snippet string       `json:"snippet"` // matches marked with « »
	Score   float64      `json:"score"`   // higher is better
}

// Archive is the full-text index over message events (BM25).
type Archive interface {
	// Search runs a full-text query. Identifier-like terms (INV-4401,
	// trace_id=checkout-failure-2026-03-15, src/app/main.go) match exactly,
	// not as loose word soup. A query with no searchable term returns no
	// hits and no error; a malformed one ErrInvalid, never a SQL error.
	Search(ctx context.Context, tenant string, q SearchQuery) ([]Hit, error)
}

// Memory is one long-term memory entry.
type Memory struct {
	Namespace []string        `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Created   time.Time       `json:"created"`
	Updated   time.Time       `json:"updated"`
	Expires   time.Time       `json:"expires,omitzero"` // zero: never
	Score     float64         `json:"score,omitempty"`  // set by Search
}

// MemoryQuery searches long-term memory under a namespace prefix.
type MemoryQuery struct {
	Prefix []string
	Text   string         // "" = no text condition (newest first)
	Filter map[string]any // top-level value fields that must be equal
	Limit  int            // <= 0: 10
	Offset int
}

// Memories is the tenant's long-term namespaced key-value store
// (LangGraph Store semantics). Expired items are invisible.
type Memories interface {
	PutMemory(ctx context.Context, tenant string, it Memory) (Memory, error)
	GetMemory(ctx context.Context, tenant string, namespace []string, key string) (Memory, error)
	DeleteMemory(ctx context.Context, tenant string, namespace []string, key string) error
	SearchMemory(ctx context.Context, tenant string, q MemoryQuery) ([]Memory, error)
	// DeleteNamespace removes every item under the prefix; it returns how many.
	DeleteNamespace(ctx context.Context, tenant string, prefix []string) (int, error)
}

// Store is everything a backend provides.
type Store interface {
	Log
	Archive
	Memories
	Close() error
}

// NewRef returns a fresh random ref ("m_" + 24 hex digits): unguessable, so
// that a ref says nothing about its thread, tenant or position (I8).
func NewRef() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("store: crypto/rand failed: %v", err))
	}
	return "m_" + hex.EncodeToString(b[:])
}

// RefMaker is a store that makes the refs of its messages itself: refs as
// unguessable as NewRef's that it can also keep at less cost (SQLite: in
// an index whose new entries go at its end, see store/sqlite/refs.go). The
// engine takes new messages' refs from it. NewRef may be called from
// several goroutines at once.
type RefMaker interface {
	NewRef() string
}

// HealthChecker is a store that can tell whether it can take writes now
// (its file is in place, its database answers). The server's health check
// and readiness use it.
type HealthChecker interface {
	Health(ctx context.Context) error
}
