package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

// Thread identity and resend dedup.
//
// A client in resend mode sends its whole history every time. The proxy
// compares it with the thread's log as the client saw it — its projection:
// the recall rounds the client never saw are left out, and consecutive
// assistant messages read as one (a streamed answer that spans a recall
// round reaches the client as one message) — unit by unit, by hash. When
// the log is a prefix of what the client sent, only the rest is appended.
// When it is not (an edited or branched history, a retry of a request
// already answered), the request goes to a fork thread: it starts with a
// note naming its parent and a copy of the common prefix, and the parent is
// never touched. The fork's id is a function of the parent and the common
// prefix, so the next request of the same branch finds it again.

// Meta keys the proxy sets on the messages it records.
const (
	// MetaRecall marks a message the client never saw: a recall round of a
	// non-streamed answer, or the result of a recall tool call.
	MetaRecall = "mneme_recall"
	// MetaPartial marks a reply whose stream broke before its end.
	MetaPartial = "mneme_partial"
)

// Modes of the X-Mneme-Mode header.
const (
	ModeResend = "resend"
	ModeAppend = "append"
)

// unit is one comparable step of a conversation: a message, or a run of
// consecutive assistant messages. last is the position of its last message
// (an index into the request's messages, or a seq in the log).
type unit struct {
	h    [16]byte
	last int64
}

// unitBuilder turns messages into units incrementally.
type unitBuilder struct {
	units []unit
	open  bool   // an assistant run is open
	buf   []byte // its canonical bytes so far
	pend  []byte // its trailing text, not yet written
	last  int64
}

// add projects m and adds it at position pos.
func (u *unitBuilder) add(m *message.Message, pos int64) {
	if m.Meta[MetaRecall] == "true" {
		return
	}
	if m.Role == message.Assistant {
		if !hasVisible(m.Parts) {
			return
		}
		if !u.open {
			u.open, u.buf, u.pend = true, append(u.buf[:0], 'A'), u.pend[:0]
		}
		u.buf, u.pend = canonParts(u.buf, u.pend, m.Parts)
		u.last = pos
		return
	}
	u.close()
	role := byte('U')
	switch {
	case m.IsToolResult():
		role = 'T'
	case m.Role == message.System:
		role = 'S'
	}
	b := []byte{role}
	var pend []byte
	b, pend = canonParts(b, pend, m.Parts)
	b = flushText(b, pend)
	u.units = append(u.units, unit{h: sum(b), last: pos})
}

// close ends an open assistant run.
func (u *unitBuilder) close() {
	if u.open {
		u.units = append(u.units, unit{h: sum(flushText(u.buf, u.pend)), last: u.last})
		u.open = false
	}
}

// result returns the units, an open run included, without closing it.
func (u *unitBuilder) result() []unit {
	if !u.open {
		return u.units
	}
	b := flushText(append([]byte(nil), u.buf...), u.pend)
	return append(u.units[:len(u.units):len(u.units)], unit{h: sum(b), last: u.last})
}

func sum(b []byte) [16]byte {
	s := sha256.Sum256(b)
	var h [16]byte
	copy(h[:], s[:16])
	return h
}

// hasVisible reports whether an assistant message shows the client anything
// once the recall tool calls are taken out.
func hasVisible(ps []message.Part) bool {
	for _, p := range ps {
		if p.Type == message.ToolCall && IsRecallTool(p.ToolName) {
			continue
		}
		if p.Type == message.Text && p.Text == "" {
			continue
		}
		return true
	}
	return false
}

// canonParts writes the parts' meaning, not their spelling: the wire form,
// field order and spacing of tool arguments and the split of text into
// parts do not count (a client resends a reply in its own SDK's spelling).
// Text is accumulated in pend so that adjacent text parts read as one.
func canonParts(b, pend []byte, ps []message.Part) ([]byte, []byte) {
	for _, p := range ps {
		switch p.Type {
		case message.Text:
			pend = append(pend, p.Text...)
			continue
		case message.ToolCall:
			if IsRecallTool(p.ToolName) {
				continue
			}
		}
		b = flushText(b, pend)
		pend = pend[:0]
		b = append(b, 'p')
		b = field(b, string(p.Type))
		switch p.Type {
		case message.Image:
			b = field(b, p.ImageURL)
			b = field(b, string(p.Raw))
		case message.ToolCall:
			b = field(b, p.ToolCallID)
			b = field(b, p.ToolName)
			b = field(b, string(compactJSON(p.Arguments)))
		case message.ToolResult:
			b = field(b, p.ToolCallID)
			if p.IsError {
				b = append(b, 'E')
			}
			var sub []byte
			b, sub = canonParts(b, nil, p.Content)
			b = flushText(b, sub)
			b = append(b, 'e')
		case message.Reasoning:
			b = field(b, p.Text)
			b = field(b, p.Signature)
			b = field(b, string(p.Raw))
		case message.Opaque:
			b = field(b, string(compactJSON(string(p.Raw))))
		}
	}
	return b, pend
}

func flushText(b, pend []byte) []byte {
	if len(pend) == 0 {
		return b
	}
	b = append(b, 't')
	return field(b, string(pend))
}

func field(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// compactJSON removes insignificant spaces from JSON text; other text is
// returned as is.
func compactJSON(s string) []byte {
	var out bytes.Buffer
	if json.Compact(&out, []byte(s)) != nil {
		return []byte(s)
	}
	return out.Bytes()
}

// requestUnits returns the units of a request's messages.
func requestUnits(msgs []message.Message) []unit {
	var u unitBuilder
	for i := range msgs {
		u.add(&msgs[i], int64(i))
	}
	u.close()
	return u.units
}

// DeriveThreadID returns the id of a thread whose client names none: a
// function of the tenant and of the first system and first user message,
// so that every request of one unmodified agent run lands in one thread.
func DeriveThreadID(tenant string, msgs []message.Message) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	var sys, user bool
	for i := range msgs {
		m := &msgs[i]
		take := false
		switch {
		case m.Role == message.System && !sys:
			sys, take = true, true
		case m.StartsTurn() && !user:
			user, take = true, true
		}
		if take {
			b, pend := canonParts([]byte{byte(m.Role[0])}, nil, m.Parts)
			h.Write(flushText(b, pend))
			h.Write([]byte{0})
		}
		if sys && user {
			break
		}
	}
	return "t-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// forkID names the fork of thread id at the common prefix pre.
func forkID(id string, pre []unit) string {
	h := sha256.New()
	for _, u := range pre {
		h.Write(u.h[:])
	}
	suffix := "~" + hex.EncodeToString(h.Sum(nil)[:6])
	if len(id)+len(suffix) > 200 {
		s := sha256.Sum256([]byte(id))
		id = "f-" + hex.EncodeToString(s[:12])
	}
	return id + suffix
}

// logUnits is the cached projection of one thread's log, caught up from
// the store on every use, so that a request costs work in proportion to
// what is new.
type logUnits struct {
	mu      sync.Mutex
	b       unitBuilder
	lastSeq int64
}

type threadKey struct{ tenant, id string }

// maxCachedThreads bounds the projection cache; an evicted projection is
// rebuilt from the log on its next use.
const maxCachedThreads = 4096

// units returns the cached projection of a thread, locked.
func (p *Proxy) units(tenant, id string) *logUnits {
	k := threadKey{tenant, id}
	p.mu.Lock()
	lu := p.cache[k]
	if lu == nil {
		if len(p.cache) >= maxCachedThreads {
			for k2, v := range p.cache {
				if v.mu.TryLock() {
					v.mu.Unlock()
					delete(p.cache, k2)
					break
				}
			}
		}
		lu = &logUnits{}
		p.cache[k] = lu
	}
	p.mu.Unlock()
	lu.mu.Lock()
	return lu
}

func (lu *logUnits) catchUp(ctx context.Context, st store.Store, tenant, id string) error {
	evs, err := st.Load(ctx, tenant, id, lu.lastSeq+1, 0)
	if err != nil {
		return err
	}
	for i := range evs {
		if ev := &evs[i]; ev.Kind == store.KindMessage && ev.Message != nil {
			lu.b.add(ev.Message, ev.Seq)
		}
		lu.lastSeq = evs[i].Seq
	}
	return nil
}

// resetIfShrunk forgets the projection when the log is now shorter than
// it: the thread was deleted (by the API or the retention sweeper) and
// perhaps begun again, so the projection is rebuilt from the log.
func (lu *logUnits) resetIfShrunk(ctx context.Context, st store.Store, tenant, id string) {
	if n, err := st.LastSeq(ctx, tenant, id); err == nil && n < lu.lastSeq {
		lu.b, lu.lastSeq = unitBuilder{}, 0
	}
}

// session is one request's place in its thread.
type session struct {
	tenant     string
	id         string
	thread     *mneme.Thread
	opts       mneme.WindowOptions
	forkedFrom string
}

// maxForkDepth bounds how many forks one request may walk through;
// maxConflicts how often it compares again after a concurrent append.
const (
	maxForkDepth = 16
	maxConflicts = 50
)

var errForkDepth = errors.New("proxy: history forks too deep")

// open appends what is new of msgs to the thread (all of them in append
// mode) and returns the window for the next model call. The messages are
// in the log when it returns, whatever happens next (I1).
func (p *Proxy) open(ctx context.Context, tenant, id, mode string, msgs []message.Message, opts mneme.WindowOptions) (*session, *window.Window, error) {
	s := &session{tenant: tenant, id: id, opts: opts}
	if mode == ModeAppend {
		s.thread = p.m.Thread(tenant, id)
		_, w, err := s.thread.AppendWindow(ctx, msgs, opts)
		return s, w, err
	}
	in := requestUnits(msgs)
	conflicts := 0
	for depth := 0; ; depth++ {
		if depth > maxForkDepth {
			return nil, nil, errForkDepth
		}
		if err := store.CheckScope(tenant, s.id); err != nil {
			return nil, nil, err
		}
		lu := p.units(tenant, s.id)
		if err := lu.catchUp(ctx, p.store, tenant, s.id); err != nil {
			lu.mu.Unlock()
			return nil, nil, err
		}
		have := lu.b.result()
		k := 0
		for k < len(have) && k < len(in) && have[k].h == in[k].h {
			k++
		}
		if k == len(have) {
			var fresh []message.Message
			switch {
			case k == 0:
				fresh = msgs
			case k < len(in):
				fresh = msgs[in[k-1].last+1:]
			}
			s.thread = p.m.Thread(tenant, s.id)
			_, w, err := s.thread.AppendWindowAt(ctx, lu.lastSeq, fresh, opts)
			if errors.Is(err, store.ErrConflict) {
				lu.resetIfShrunk(ctx, p.store, tenant, s.id)
			}
			lu.mu.Unlock()
			if errors.Is(err, store.ErrConflict) && conflicts < maxConflicts {
				// Another writer (a replica) moved the log since it was
				// compared: compare again, so a resent suffix lands once.
				conflicts++
				depth--
				continue
			}
			return s, w, err
		}
		// The history differs from the log: continue in the fork.
		var through int64
		if k > 0 {
			through = have[k-1].last
		}
		lu.mu.Unlock()
		parent := s.id
		s.id = forkID(parent, in[:k])
		if s.forkedFrom == "" {
			s.forkedFrom = parent
		}
		if err := p.fork(ctx, tenant, parent, s.id, through); err != nil {
			return nil, nil, err
		}
	}
}

// fork starts thread child as a copy of parent's messages up to seq
// through, unless it exists already. The first event, a note naming the
// parent, is written with optimistic concurrency: of two requests forking
// at once, one copies and the other finds the copy.
func (p *Proxy) fork(ctx context.Context, tenant, parent, child string, through int64) error {
	lu := p.units(tenant, child)
	defer lu.mu.Unlock()
	note, _ := json.Marshal(map[string]any{"forked_from": parent, "through_seq": through})
	_, err := p.store.Append(ctx, tenant, child, 0, []store.Event{{Kind: store.KindNote, Data: note}})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fork %s: %w", child, err)
	}
	if through == 0 {
		return nil
	}
	evs, err := p.store.Load(ctx, tenant, parent, 1, int(through))
	if err != nil {
		return fmt.Errorf("fork %s: %w", child, err)
	}
	var msgs []message.Message
	for _, ev := range evs {
		if ev.Kind == store.KindMessage && ev.Message != nil && ev.Seq <= through {
			m := ev.Message.Clone()
			m.Time = ev.At
			msgs = append(msgs, m)
		}
	}
	if _, err := p.m.Thread(tenant, child).Append(ctx, msgs...); err != nil {
		return fmt.Errorf("fork %s: %w", child, err)
	}
	return nil
}
