package mneme

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
)

// A thread's projection is its log as the client saw it, reduced to what
// the model would see: the messages the client never saw (recall rounds)
// are left out, consecutive assistant messages read as one step (a
// streamed answer spanning a recall round reaches the client as one
// message; a harness may add its own tool call after a text reply), and
// so do consecutive tool results (one Anthropic user message or several
// OpenAI tool messages). Each step is hashed over its meaning, not its
// spelling, so a history re-encoded by a client's SDK compares equal.
//
// The leading system messages are not part of the comparison: they are the
// thread's system prompt, kept beside the units, and a request that brings
// another one changes it (a system event) instead of forking.

// MetaRecall marks a message the client never saw: a recall round of a
// non-streamed answer, or the result of a recall tool call.
const MetaRecall = "mneme_recall"

// unit is one comparable step of a conversation. first and last are the
// positions of its first and last message (an index into a request's
// messages, or a seq in the log).
type unit struct {
	h           [16]byte
	kind        byte // 'U' user, 'A' assistant run, 'T' tool-result run, 'S' system
	first, last int64
}

// Call states the projection tracks to check tool results in append mode.
const (
	callOpen   = 1 // made, not yet answered
	callClosed = 2 // answered, or closed by a later step with a synthetic result
)

// projector turns messages into units incrementally.
type projector struct {
	units []unit
	open  bool // a run (kind runKind) is open
	kind  byte
	buf   []byte // the open run's canonical bytes so far
	pend  []byte // its trailing text, not yet written
	// one and onePend are scratch for a single message's unit, kept so
	// that projecting a long history does not allocate per message.
	one, onePend []byte
	first        int64
	last         int64

	started bool              // a non-system message was seen
	leadSys []message.Message // the leading system messages
	system  []message.Message // the system prompt: leadSys or the last system event
	sysSet  bool              // a system event replaced leadSys

	calls   map[string]uint8 // tool call id -> callOpen/callClosed (log side only)
	step    []string         // the calls of the last step, in case still open
	parent  string           // forked_from of the thread's first note
	lastSeq int64            // the last seq applied (log side)
	broken  bool             // an event was skipped: rebuild from the log
}

// Hidden reports whether m is a message the client never saw.
func Hidden(m *message.Message) bool { return m.Meta[MetaRecall] == "true" }

// isRecallTool reports the tools the engine answers itself.
func isRecallTool(name string) bool { return name == recall.ToolSearch || name == recall.ToolRead }

// add projects m at position pos.
func (u *projector) add(m *message.Message, pos int64) {
	if u.calls != nil {
		u.track(m)
	}
	if Hidden(m) {
		return
	}
	if m.Role == message.System && !u.started {
		u.leadSys = append(u.leadSys, *m)
		if !u.sysSet {
			u.system = append(u.system, *m)
		}
		return
	}
	u.started = true
	var kind byte
	switch {
	case m.Role == message.Assistant:
		if !hasVisible(m.Parts) {
			return
		}
		kind = 'A'
	case m.IsToolResult():
		kind = 'T'
	case m.Role == message.System:
		kind = 'S'
	default:
		kind = 'U'
	}
	if kind == 'A' || kind == 'T' {
		if !u.open || u.kind != kind {
			u.close()
			u.open, u.kind, u.first = true, kind, pos
			u.buf, u.pend = append(u.buf[:0], kind), u.pend[:0]
		}
		u.buf, u.pend = canonParts(u.buf, u.pend, m.Parts)
		u.last = pos
		return
	}
	u.close()
	b, pend := canonParts(append(u.one[:0], kind), u.onePend[:0], m.Parts)
	b = flushText(b, pend)
	u.units = append(u.units, unit{h: sum(b), kind: kind, first: pos, last: pos})
	u.one, u.onePend = b, pend
}

// track follows the tool calls of the log: a result closes its call, and
// so does any later message that is not a tool result (the window answers
// the call with a synthetic result there).
func (u *projector) track(m *message.Message) {
	for _, p := range m.Parts {
		if p.Type == message.ToolResult {
			u.calls[p.ToolCallID] = callClosed
		}
	}
	if !m.IsToolResult() {
		for _, id := range u.step {
			u.calls[id] = callClosed
		}
		u.step = u.step[:0]
	}
	for _, p := range m.Parts {
		if p.Type == message.ToolCall {
			u.calls[p.ToolCallID] = callOpen
			u.step = append(u.step, p.ToolCallID)
		}
	}
}

// close ends an open run.
func (u *projector) close() {
	if u.open {
		u.units = append(u.units, unit{h: sum(flushText(u.buf, u.pend)), kind: u.kind, first: u.first, last: u.last})
		u.open = false
	}
}

// result returns the units, an open run included, without closing it.
func (u *projector) result() []unit {
	if !u.open {
		return u.units
	}
	b := flushText(append([]byte(nil), u.buf...), u.pend)
	return append(u.units[:len(u.units):len(u.units)], unit{h: sum(b), kind: u.kind, first: u.first, last: u.last})
}

// openCanon returns the open run's canonical bytes (nil when none).
func (u *projector) openCanon() []byte {
	if !u.open {
		return nil
	}
	return flushText(append([]byte(nil), u.buf...), u.pend)
}

// applyEvent feeds one log event to the projection.
func (u *projector) applyEvent(ev *store.Event) {
	if u.broken {
		// The units wait for a rebuild; the system prompt, which every
		// window reads, follows the log meanwhile (a state restored from a
		// snapshot starts so).
		if ev.Kind == store.KindNote {
			var n historyNote
			if json.Unmarshal(ev.Data, &n) == nil && n.System != nil {
				u.system, u.sysSet = *n.System, true
			}
		}
		return
	}
	if ev.Seq != u.lastSeq+1 {
		u.broken = true // the state was loaded from elsewhere: rebuild on use
		return
	}
	u.lastSeq = ev.Seq
	switch ev.Kind {
	case store.KindMessage:
		if ev.Message != nil {
			u.add(ev.Message, ev.Seq)
		}
	case store.KindNote:
		var n historyNote
		if json.Unmarshal(ev.Data, &n) != nil {
			return
		}
		if n.ForkedFrom != "" && ev.Seq == 1 {
			u.parent = n.ForkedFrom
		}
		if n.System != nil {
			u.system, u.sysSet = *n.System, true
		}
	}
}

func newLogProjector() projector { return projector{calls: map[string]uint8{}} }

// historyNote is the payload of the note events this file writes: the
// first event of a fork, and a system prompt change.
type historyNote struct {
	ForkedFrom string `json:"forked_from,omitempty"`
	ThroughSeq int64  `json:"through_seq,omitempty"`
	// System, when present, is the thread's system prompt from this event
	// on (it replaces the leading system messages in every window).
	System *[]message.Message `json:"system_prompt,omitempty"`
}

// systemKey hashes a system prompt's meaning.
func systemKey(msgs []message.Message) [16]byte {
	b := []byte{'S'}
	for i := range msgs {
		var pend []byte
		b, pend = canonParts(append(b, 's'), nil, msgs[i].Parts)
		b = flushText(b, pend)
	}
	return sum(b)
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
		if p.Type == message.ToolCall && isRecallTool(p.ToolName) {
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
// unknown fields (refusal, annotations), the order and spacing of JSON
// object members and the split of text into parts do not count. Text is
// accumulated in pend so that adjacent text parts read as one.
func canonParts(b, pend []byte, ps []message.Part) ([]byte, []byte) {
	for _, p := range ps {
		switch p.Type {
		case message.Text:
			pend = append(pend, p.Text...)
			continue
		case message.ToolCall:
			if isRecallTool(p.ToolName) {
				continue
			}
		}
		b = flushText(b, pend)
		pend = pend[:0]
		b = append(b, 'p')
		b = field(b, p.Type)
		switch p.Type {
		case message.Image:
			b = field(b, p.ImageURL)
			b = canonField(b, p.Raw)
		case message.ToolCall:
			b = field(b, p.ToolCallID)
			b = field(b, p.ToolName)
			b = canonField(b, p.Arguments)
		case message.ToolResult:
			b = field(b, p.ToolCallID)
			if p.IsError {
				b = append(b, 'E')
			}
			// pend is empty here: its buffer holds the result's text.
			var sub []byte
			b, sub = canonParts(b, pend, p.Content)
			b = flushText(b, sub)
			b = append(b, 'e')
			pend = sub[:0]
		case message.Reasoning:
			b = field(b, p.Text)
			b = field(b, p.Signature)
			b = field(b, p.Raw)
		case message.Opaque:
			b = canonField(b, p.Raw)
		}
	}
	return b, pend
}

func flushText(b, pend []byte) []byte {
	if len(pend) == 0 {
		return b
	}
	b = append(b, 't')
	return field(b, pend)
}

func field[T ~string | ~[]byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// canonJSON returns JSON text with its object members sorted and its
// spaces removed (numbers kept as written); other text is returned as is.
func canonJSON[T ~string | ~[]byte](s T) []byte {
	if len(s) == 0 {
		return []byte(s)
	}
	if (s[0] == '{' || s[0] == '[') && isCanonJSON(s) {
		return []byte(s) // most tool arguments: no decoding, no encoding
	}
	return canonJSONSlow([]byte(s))
}

// canonField writes canonJSON(s) as a field.
func canonField[T ~string | ~[]byte](b []byte, s T) []byte {
	if len(s) > 0 && (s[0] == '{' || s[0] == '[') && isCanonJSON(s) {
		return field(b, s)
	}
	return field(b, canonJSON(s))
}

func canonJSONSlow(s []byte) []byte {
	if s[0] != '{' && s[0] != '[' {
		var out bytes.Buffer
		if json.Compact(&out, s) != nil {
			return s
		}
		return out.Bytes()
	}
	d := json.NewDecoder(bytes.NewReader(s))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return s
	}
	out, err := json.Marshal(v)
	if err != nil {
		return s
	}
	return out
}

// requestProjection projects a request's messages.
func requestProjection(msgs []message.Message) projector {
	u := projector{units: make([]unit, 0, len(msgs))}
	for i := range msgs {
		u.add(&msgs[i], int64(i))
	}
	u.close()
	return u
}

// branchID names the branch of thread id whose history diverges from it
// with the units pre (the common prefix, then the first message of the
// step that differs). Siblings diverging at one point differ there, so
// each is a child of the thread, never of one another.
func branchID(id string, pre []unit) string {
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

// headUnit is the unit of the first message of u alone: a branch is keyed
// by it, not by the whole step, so that a branch whose last step grows (a
// harness adds a tool call to a reply) is found again.
func headUnit(msgs []message.Message, u unit) unit {
	b, pend := canonParts([]byte{u.kind}, nil, msgs[u.first].Parts)
	return unit{h: sum(flushText(b, pend)), kind: u.kind, first: u.first, last: u.first}
}

// DeriveThreadID returns the id of a thread whose client names none: a
// function of the tenant and of the first user message, so that every
// request of one agent run lands in one thread. The system prompt is not
// part of it: agents that put the time or the step in it still keep one
// thread.
func DeriveThreadID(tenant string, msgs []message.Message) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	for i := range msgs {
		if m := &msgs[i]; m.StartsTurn() {
			b, pend := canonParts([]byte{'U'}, nil, m.Parts)
			h.Write(flushText(b, pend))
			break
		}
	}
	return "t-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// runExtends reports whether the log's open run (canonical bytes have)
// is the start of the request's run msgs[from..to], and if so where the
// request's run goes on: the message index and part index of the first
// part the log lacks (part == 0: a whole message). It compares at part
// boundaries, so a harness that adds a tool call to a reply (in the same
// message or the next one) extends it.
func runExtends(have []byte, kind byte, msgs []message.Message, from, to int64) (msg, part int, ok bool) {
	b := []byte{kind}
	var pend []byte
	at := func() bool {
		c := flushText(append([]byte(nil), b...), pend)
		return bytes.Equal(c, have)
	}
	for i := from; i <= to; i++ {
		m := &msgs[i]
		if Hidden(m) || kind == 'A' && !hasVisible(m.Parts) {
			continue
		}
		for j := range m.Parts {
			if at() {
				if j == 0 || onlyInvisible(m.Parts[:j]) {
					return int(i), 0, true
				}
				return int(i), j, true
			}
			b, pend = canonParts(b, pend, m.Parts[j:j+1])
		}
	}
	return 0, 0, false
}

func onlyInvisible(ps []message.Part) bool {
	for _, p := range ps {
		if !(p.Type == message.Text && p.Text == "") && !(p.Type == message.ToolCall && isRecallTool(p.ToolName)) {
			return false
		}
	}
	return true
}

// isCanonJSON reports whether s is JSON text that canonJSONSlow returns
// unchanged, by a conservative scan: no space outside strings, object
// members in strictly increasing order, strings of printable ASCII that
// encoding/json writes as they are (no escape, no '<', '>' or '&'),
// numbers as written. Anything else (another order, escapes, non-ASCII
// text) is left to the slow path, which decides.
func isCanonJSON[T ~string | ~[]byte](s T) bool {
	i, ok := canonValue(s, 0, 0)
	return ok && i == len(s)
}

// canonValue scans the value at s[i] and returns the index after it.
func canonValue[T ~string | ~[]byte](s T, i, depth int) (int, bool) {
	if i >= len(s) || depth > 100 {
		return i, false
	}
	switch c := s[i]; {
	case c == '{':
		i++
		if i < len(s) && s[i] == '}' {
			return i + 1, true
		}
		var prev T
		for n := 0; ; n++ {
			start := i
			j, ok := canonString(s, i)
			if !ok {
				return j, false
			}
			key := s[start+1 : j-1]
			if n > 0 && string(key) <= string(prev) {
				return j, false // out of order, or a duplicate (the last wins)
			}
			prev = key
			if j >= len(s) || s[j] != ':' {
				return j, false
			}
			if i, ok = canonValue(s, j+1, depth+1); !ok || i >= len(s) {
				return i, false
			}
			switch s[i] {
			case ',':
				i++
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '[':
		i++
		if i < len(s) && s[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = canonValue(s, i, depth+1); !ok || i >= len(s) {
				return i, false
			}
			switch s[i] {
			case ',':
				i++
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '"':
		return canonString(s, i)
	case c == '-' || '0' <= c && c <= '9':
		return canonNumber(s, i)
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(s)-i >= len(lit) && string(s[i:i+len(lit)]) == lit {
				return i + len(lit), true
			}
		}
		return i, false
	}
}

// canonString scans a string at s[i] that encoding/json writes back as it
// is.
func canonString[T ~string | ~[]byte](s T, i int) (int, bool) {
	if i >= len(s) || s[i] != '"' {
		return i, false
	}
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20 || c > 0x7e || c == '\\' || c == '<' || c == '>' || c == '&':
			return i, false
		}
	}
	return i, false
}

// canonNumber scans a number in JSON's grammar at s[i].
func canonNumber[T ~string | ~[]byte](s T, i int) (int, bool) {
	digits := func() bool {
		start := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		return i > start
	}
	if s[i] == '-' {
		i++
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if !digits() {
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if !digits() {
			return i, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if !digits() {
			return i, false
		}
	}
	return i, true
}
