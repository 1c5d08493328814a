// Package inmem is the in-process store.Store: everything lives in maps
// behind one mutex, for tests and ephemeral use. It has the full semantics of
// the durable backends (optimistic appends, BM25 archive search with exact
// identifiers, memories with TTL) and passes store/storetest.
//
// It imports no database driver and nothing outside the store and message
// packages.
package inmem

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/fulltext"
)

// Store is an in-memory store.Store. The zero value is not usable: call New.
type Store struct {
	mu      sync.RWMutex
	tenants map[string]*tenant
	now     func() time.Time
	closed  bool
}

type tenant struct {
	threads  map[string]*thread
	refs     map[string]refLoc
	memories map[string]*store.Memory // JoinNamespace(ns) + "\x00" + key
}

type refLoc struct {
	thread string
	seq    int64
}

// thread holds its own archive index, so that searching it costs what it
// holds, whatever else the store holds.
type thread struct {
	info     store.ThreadInfo
	events   []storedEvent                // events[i].Seq == i+1
	docs     []*doc                       // docs[seq-1]: a message's, nil for other events
	postings map[string]*fulltext.Posting // term → the seqs holding it, with its count in each
	// The window snapshot (snapshot.go), gone with the thread.
	snapSeq int64
	snap    []byte
}

// storedEvent keeps the message as JSON so that callers can neither mutate
// the log through a returned pointer nor observe a difference from the
// durable backends, which round-trip through JSON too.
type storedEvent struct {
	ev   store.Event // Message nil
	msg  string      // backend.EncodeMessage's form; "" for no message
	role message.Role
	tool string
	doc  *doc // its index entry, made before the store is locked
}

type doc struct {
	terms []string // fulltext.IndexTerms(text)
	text  string   // fulltext.SearchText
}

// New returns an empty store.
func New() *Store {
	return &Store{tenants: map[string]*tenant{}, now: time.Now}
}

var _ store.Store = (*Store)(nil)

var errClosed = fmt.Errorf("%w: store closed", store.ErrInvalid)

// Close releases the store; later calls fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.tenants = nil
	return nil
}

func (s *Store) tenant(name string, create bool) *tenant {
	t := s.tenants[name]
	if t == nil && create {
		t = &tenant{
			threads:  map[string]*thread{},
			refs:     map[string]refLoc{},
			memories: map[string]*store.Memory{},
		}
		s.tenants[name] = t
	}
	return t
}

func (s *Store) clock() time.Time { return s.now().UTC().Round(0) }

// Append implements store.Log.
func (s *Store) Append(ctx context.Context, tenantID, threadID string, after int64, evs []store.Event) ([]store.Event, error) {
	if err := backend.CheckScope(tenantID, threadID); err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, fmt.Errorf("%w: negative after", store.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock()
	// Encode outside the lock: messages may be megabytes.
	prepared := make([]storedEvent, len(evs))
	loaded := make([]*message.Message, len(evs)) // the messages as a Load gives them
	refs := map[string]bool{}
	for i, ev := range evs {
		if err := backend.CheckEvent(ev); err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		se := storedEvent{ev: ev}
		se.ev.Seq = after + int64(i) + 1
		se.ev.Message = nil
		if se.ev.At.IsZero() {
			se.ev.At = now
		}
		se.ev.At = se.ev.At.UTC().Round(0)
		if ev.Kind == store.KindMessage {
			if se.ev.Ref == "" {
				se.ev.Ref = store.NewRef()
			}
			js, err := backend.EncodeMessage(ev.Message)
			if err != nil {
				return nil, err
			}
			se.msg, se.role = js, ev.Message.Role
			if loaded[i], err = backend.NormalizeMessage(ev.Message); err != nil {
				return nil, err
			}
			text := fulltext.SearchText(*ev.Message, se.ev.At)
			se.doc = &doc{terms: fulltext.IndexTerms(text), text: text}
		}
		if se.ev.Ref != "" {
			if refs[se.ev.Ref] {
				return nil, fmt.Errorf("%w: duplicate ref %q", store.ErrInvalid, se.ev.Ref)
			}
			refs[se.ev.Ref] = true
		}
		if len(ev.Data) > 0 {
			se.ev.Data = append(json.RawMessage(nil), ev.Data...)
		}
		prepared[i] = se
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	t := s.tenant(tenantID, len(evs) > 0)
	var th *thread
	if t != nil {
		th = t.threads[threadID]
	}
	var last int64
	if th != nil {
		last = th.info.Events
	}
	if last != after {
		return nil, fmt.Errorf("%w: last seq is %d, not %d", store.ErrConflict, last, after)
	}
	if len(evs) == 0 {
		return []store.Event{}, nil
	}
	for r := range refs {
		if _, dup := t.refs[r]; dup {
			return nil, fmt.Errorf("%w: ref %q already used", store.ErrInvalid, r)
		}
	}
	if th == nil {
		th = &thread{info: store.ThreadInfo{ID: threadID, Created: now}, postings: map[string]*fulltext.Posting{}}
		t.threads[threadID] = th
	}
	out := make([]store.Event, len(prepared))
	for i := range prepared {
		se := &prepared[i]
		if se.msg != "" {
			m := evs[i].Message
			se.tool = backend.ToolOf(*m, func(id string) string { return findCall(th, prepared[:i], evs[:i], id) })
			th.info.Messages++
			th.info.Tokens += int64(se.ev.Tokens)
			th.index(se.ev.Seq, se.doc)
			se.doc = nil
		}
		if se.ev.Ref != "" {
			t.refs[se.ev.Ref] = refLoc{threadID, se.ev.Seq}
		}
		th.events = append(th.events, *se)
		out[i] = se.ev
		out[i].Message = loaded[i]
		if out[i].Data != nil {
			out[i].Data = append(json.RawMessage(nil), out[i].Data...)
		}
	}
	th.info.Events = after + int64(len(evs))
	th.info.Updated = now
	return out, nil
}

// findCall looks for the tool call callID, newest first, in the batch being
// appended and then in the thread's log.
func findCall(th *thread, batch []storedEvent, msgs []store.Event, callID string) string {
	for i := len(batch) - 1; i >= 0; i-- {
		if m := msgs[i].Message; m != nil {
			if n := backend.CallName(*m, callID); n != "" {
				return n
			}
		}
	}
	for i := len(th.events) - 1; i >= 0 && i >= len(th.events)-200; i-- {
		se := th.events[i]
		if se.role != message.Assistant {
			continue
		}
		if m, err := backend.DecodeMessage(se.msg); err == nil {
			if n := backend.CallName(*m, callID); n != "" {
				return n
			}
		}
	}
	return ""
}

func (se storedEvent) event() store.Event {
	ev := se.ev
	if se.msg != "" {
		// It was produced by backend.EncodeMessage, so it decodes.
		m, err := backend.DecodeMessage(se.msg)
		if err != nil {
			m = &message.Message{}
		}
		ev.Message = m
	}
	if ev.Data != nil {
		ev.Data = append(json.RawMessage(nil), ev.Data...)
	}
	return ev
}

// index adds the document of the message at seq, past every seq indexed
// so far (a thread's seqs only grow), to the thread's index.
func (th *thread) index(seq int64, d *doc) {
	for int64(len(th.docs)) < seq-1 {
		th.docs = append(th.docs, nil)
	}
	th.docs = append(th.docs, d)
	for _, term := range d.terms {
		p := th.postings[term]
		if p == nil {
			p = &fulltext.Posting{}
			th.postings[term] = p
		}
		p.Add(seq)
	}
}

// The thread's index as fulltext.Tally.AddPostings reads it.
func (th *thread) Posting(tok string) *fulltext.Posting { return th.postings[tok] }
func (th *thread) Len(seq int64) int                    { return len(th.docs[seq-1].terms) }
func (th *thread) Terms(seqs []int64) ([][]string, error) {
	out := make([][]string, len(seqs))
	for i, seq := range seqs {
		out[i] = th.docs[seq-1].terms
	}
	return out, nil
}

// Load implements store.Log.
func (s *Store) Load(ctx context.Context, tenantID, threadID string, from int64, limit int) ([]store.Event, error) {
	if err := backend.CheckScope(tenantID, threadID); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	th := s.lookup(tenantID, threadID)
	if th == nil {
		return nil, nil
	}
	from = max(from, 1)
	if from > int64(len(th.events)) {
		return nil, nil
	}
	evs := th.events[from-1:]
	if limit > 0 && len(evs) > limit {
		evs = evs[:limit]
	}
	out := make([]store.Event, len(evs))
	for i, se := range evs {
		out[i] = se.event()
	}
	return out, nil
}

func (s *Store) lookup(tenantID, threadID string) *thread {
	t := s.tenants[tenantID]
	if t == nil {
		return nil
	}
	return t.threads[threadID]
}

// LastSeq implements store.Log.
func (s *Store) LastSeq(ctx context.Context, tenantID, threadID string) (int64, error) {
	if err := backend.CheckScope(tenantID, threadID); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, errClosed
	}
	if th := s.lookup(tenantID, threadID); th != nil {
		return th.info.Events, nil
	}
	return 0, nil
}

// Threads implements store.Log.
func (s *Store) Threads(ctx context.Context, tenantID string, p store.Page) ([]store.ThreadInfo, string, error) {
	if err := backend.CheckScope(tenantID, "-"); err != nil {
		return nil, "", err
	}
	limit := p.Size()
	var (
		curAt time.Time
		curID string
	)
	if p.Cursor != "" {
		var err error
		if curAt, curID, err = backend.DecodeCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, "", errClosed
	}
	t := s.tenants[tenantID]
	if t == nil {
		return nil, "", nil
	}
	all := make([]store.ThreadInfo, 0, len(t.threads))
	for _, th := range t.threads {
		all = append(all, th.info)
	}
	sort.Slice(all, func(i, j int) bool { return threadBefore(all[i], all[j]) })
	var out []store.ThreadInfo
	for _, ti := range all {
		if p.Cursor != "" && !threadBefore(store.ThreadInfo{ID: curID, Updated: curAt}, ti) {
			continue
		}
		if len(out) == limit {
			last := out[len(out)-1]
			return out, backend.EncodeCursor(last.Updated, last.ID), nil
		}
		out = append(out, ti)
	}
	return out, "", nil
}

// threadBefore orders listings: most recently updated first, then by id.
func threadBefore(a, b store.ThreadInfo) bool {
	if !a.Updated.Equal(b.Updated) {
		return a.Updated.After(b.Updated)
	}
	return a.ID < b.ID
}

// Thread implements store.Log.
func (s *Store) Thread(ctx context.Context, tenantID, threadID string) (store.ThreadInfo, error) {
	if err := backend.CheckScope(tenantID, threadID); err != nil {
		return store.ThreadInfo{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ThreadInfo{}, errClosed
	}
	th := s.lookup(tenantID, threadID)
	if th == nil {
		return store.ThreadInfo{}, store.ErrNotFound
	}
	return th.info, nil
}

// DeleteThread implements store.Log.
func (s *Store) DeleteThread(ctx context.Context, tenantID, threadID string) error {
	if err := backend.CheckScope(tenantID, threadID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	th := s.lookup(tenantID, threadID)
	if th == nil {
		return store.ErrNotFound
	}
	t := s.tenants[tenantID]
	for _, se := range th.events {
		if se.ev.Ref != "" {
			delete(t.refs, se.ev.Ref)
		}
	}
	delete(t.threads, threadID)
	return nil
}

// EventByRef implements store.Log.
func (s *Store) EventByRef(ctx context.Context, tenantID, ref string) (string, store.Event, error) {
	if err := backend.CheckScope(tenantID, "-"); err != nil {
		return "", store.Event{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return "", store.Event{}, errClosed
	}
	t := s.tenants[tenantID]
	if t == nil {
		return "", store.Event{}, store.ErrNotFound
	}
	loc, ok := t.refs[ref]
	if !ok {
		return "", store.Event{}, store.ErrNotFound
	}
	th := t.threads[loc.thread]
	return loc.thread, th.events[loc.seq-1].event(), nil
}
