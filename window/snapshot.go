package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"

	// The v1 semantics on the v2 engine: decoding a window-sized snapshot
	// is about 4x faster than with encoding/json, and a cold start is
	// mostly that decoding.
	json "github.com/go-json-experiment/json/v1"

	"github.com/mnemehq/mneme/message"
)

// SnapshotVersion is the version of the snapshot encoding. Bump it whenever
// what Apply builds changes (a new field, another rendering of a form, a
// different count): a snapshot of another version is refused and the state
// rebuilt from the log, which stays the definition (I7).
const SnapshotVersion = 4

// ErrSnapshotVersion: the snapshot was written by another SnapshotVersion.
var ErrSnapshotVersion = errors.New("window: snapshot of another version")

// Snapshot is a copy of a State, taken cheaply under the caller's lock and
// encoded later (off the request path): Restore of its encoding, then Apply
// of the events after LastSeq, gives the state Apply of the whole log gives.
type Snapshot struct {
	V        int              `json:"v"`
	Policy   Policy           `json:"policy"`
	Budget   int              `json:"budget"`
	LastSeq  int64            `json:"last_seq"`
	Head     []snapItem       `json:"head,omitempty"`
	HeadDone bool             `json:"head_done,omitempty"`
	Blocks   []Block          `json:"blocks,omitempty"`
	Tail     []snapItem       `json:"tail,omitempty"`
	HeadTok  int              `json:"head_tok"`
	MemTok   int              `json:"mem_tok"`
	TailTok  int              `json:"tail_tok"`
	MemStale bool             `json:"mem_stale,omitempty"`
	MemMsg   *message.Message `json:"mem_msg,omitempty"`
	Injected string           `json:"injected,omitempty"`
	Recalls  []recalled       `json:"recalls,omitempty"`
	TurnSeq  int64            `json:"turn_seq,omitempty"`
	// Out is the rendered window when it is not what rebuildOut renders
	// from the items (nil when it is, which is the rule).
	Out []message.Message `json:"out,omitempty"`
	// The calls a result can still pair with are those of the items above
	// (State.calls): Restore indexes them again, nothing of the log's
	// length is kept. Version 1 held every call of the log here.
	Pending       []string `json:"pending,omitempty"`
	Messages      int64    `json:"messages"`
	ThreadTokens  int64    `json:"thread_tokens"`
	Dropped       []string `json:"dropped,omitempty"`
	Compactions   int      `json:"compactions,omitempty"`
	Reflections   int      `json:"reflections,omitempty"`
	LastCompacted int64    `json:"last_compacted,omitempty"`

	head, tail []Item            // the copies Encode reads
	out        []message.Message // the rendered window as taken
}

// snapItem is an Item as encoded. Its messages are not in the JSON but
// in the binary section after it (see Encode): Out is left out when it is
// the message itself, as it is for nearly every item.
type snapItem struct {
	Seq        int64             `json:"seq"`
	Ref        string            `json:"ref,omitempty"`
	At         int64             `json:"at"`
	Msg        *message.Message  `json:"-"`
	Form       Form              `json:"form"`
	Out        *message.Message  `json:"-"`
	Tokens     int               `json:"tokens"`
	Boundary   bool              `json:"boundary,omitempty"`
	Tools      []string          `json:"tools,omitempty"`
	Post       []message.Message `json:"-"`
	PostTokens int               `json:"post_tokens,omitempty"`
}

// Snapshot copies the state: the items' values and the maps, not the
// messages, which nothing mutates once applied. O(window) copying, no
// encoding.
func (s *State) Snapshot() *Snapshot {
	sn := &Snapshot{
		V: SnapshotVersion, Policy: s.policy, Budget: s.budget, LastSeq: s.lastSeq,
		HeadDone: s.headDone, Blocks: append([]Block(nil), s.blocks...), Recalls: append([]recalled(nil), s.recalls...), TurnSeq: s.turnSeq,
		HeadTok: s.headTok, MemTok: s.memTok, TailTok: s.tailTok, MemStale: s.memStale, Injected: s.injected,
		Messages: s.messages, ThreadTokens: s.threadTokens,
		Dropped: append([]string(nil), s.dropped...), Compactions: s.compactions, Reflections: s.reflections,
		LastCompacted: s.lastCompacted,
	}
	if s.memMsg != nil {
		m := *s.memMsg
		sn.MemMsg = &m
	}
	for id := range s.pending {
		sn.Pending = append(sn.Pending, id)
	}
	slices.Sort(sn.Pending) // a set: sorted, so that one state has one encoding
	sn.head = make([]Item, len(s.head))
	for i, it := range s.head {
		sn.head[i] = *it
		sn.head[i].Tools = append([]string(nil), it.Tools...)
		sn.head[i].Post = append([]message.Message(nil), it.Post...)
	}
	sn.tail = make([]Item, len(s.tail))
	for i, it := range s.tail {
		sn.tail[i] = *it
		sn.tail[i].Tools = append([]string(nil), it.Tools...)
		sn.tail[i].Post = append([]message.Message(nil), it.Post...)
	}
	sn.out = append([]message.Message(nil), s.out...)
	return sn
}

// The encoding (version 4 on): snapMark, the uvarint length of the
// snapshot's JSON, the JSON, then the items' messages (head, then tail) in
// message.AppendBinary's form: for each item a 1 and its message, then a 0
// when Out is the message or a 1 and Out, then its Post as a count plus
// one (0 for nil) and the messages. A window's messages are most of a
// snapshot's bytes, and read from JSON they were most of a cold start
// (about 100 MB/s: every string scanned for escapes and copied); copied
// out by length they cost a fraction of that. A snapshot of version 3 or older
// is JSON alone, which never starts with snapMark.
const snapMark = 0

// Encode returns the snapshot's encoding. It is safe to call while the
// State moves on.
func (sn *Snapshot) Encode() ([]byte, error) {
	sn.Head, sn.Tail = encodeItems(sn.head), encodeItems(sn.tail)
	sn.Out = nil
	if !sameMessages(sn.out, render(ptrs(sn.head), sn.MemMsg, ptrs(sn.tail), recallMessages(sn.Recalls))) {
		sn.Out = sn.out
	}
	js, err := json.Marshal(sn)
	if err != nil {
		return nil, err
	}
	b := binary.AppendUvarint([]byte{snapMark}, uint64(len(js)))
	b = append(b, js...)
	for _, items := range [][]snapItem{sn.Head, sn.Tail} {
		for i := range items {
			b = appendItemMessages(b, &items[i])
		}
	}
	return b, nil
}

func appendItemMessages(b []byte, si *snapItem) []byte {
	if si.Msg == nil {
		b = append(b, 0)
	} else {
		b = message.AppendBinary(append(b, 1), si.Msg)
	}
	if si.Out == nil {
		b = append(b, 0)
	} else {
		b = message.AppendBinary(append(b, 1), si.Out)
	}
	if si.Post == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(si.Post))+1)
	for i := range si.Post {
		b = message.AppendBinary(b, &si.Post[i])
	}
	return b
}

// errSnapshotBinary: the messages after a snapshot's JSON do not decode.
var errSnapshotBinary = errors.New("window: snapshot: malformed messages")

// readItemMessages reads what appendItemMessages wrote for si from rest.
func readItemMessages(rest []byte, si *snapItem) ([]byte, error) {
	var err error
	flag := func() byte {
		if err != nil || len(rest) == 0 {
			err = errSnapshotBinary
			return 0
		}
		f := rest[0]
		rest = rest[1:]
		return f
	}
	msg := func() *message.Message {
		if err != nil {
			return nil
		}
		var m message.Message
		m, rest, err = message.ReadBinary(rest)
		return &m
	}
	if flag() == 1 {
		si.Msg = msg()
	}
	if flag() == 1 {
		si.Out = msg()
	}
	if err != nil {
		return nil, err
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)) {
		return nil, errSnapshotBinary
	}
	rest = rest[k:]
	if n > 0 {
		si.Post = make([]message.Message, n-1)
		for i := range si.Post {
			si.Post[i], rest, err = message.ReadBinary(rest)
			if err != nil {
				return nil, err
			}
		}
	}
	return rest, err
}

func ptrs(items []Item) []*Item {
	out := make([]*Item, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func encodeItems(items []Item) []snapItem {
	out := make([]snapItem, len(items))
	for i := range items {
		it := &items[i]
		si := snapItem{Seq: it.Seq, Ref: it.Ref, At: it.At, Msg: it.Msg, Form: it.Form, Tokens: it.Tokens,
			Boundary: it.Boundary, Tools: it.Tools, Post: it.Post, PostTokens: it.PostTokens}
		if it.Msg == nil || !reflect.DeepEqual(it.Out, *it.Msg) {
			o := it.Out
			si.Out = &o
		}
		out[i] = si
	}
	return out
}

// Restore decodes a Snapshot's encoding into a State that counts with sz
// from now on. It refuses a snapshot of another version
// (ErrSnapshotVersion) or one that does not hold together.
func Restore(data []byte, sz Sizer) (*State, error) {
	var sn Snapshot
	if len(data) == 0 || data[0] != snapMark {
		// Version 3 or older: JSON alone.
		if err := json.Unmarshal(data, &sn); err != nil {
			return nil, fmt.Errorf("window: snapshot: %w", err)
		}
		return nil, fmt.Errorf("%w: %d, not %d", ErrSnapshotVersion, sn.V, SnapshotVersion)
	}
	n, k := binary.Uvarint(data[1:])
	if k <= 0 || n > uint64(len(data)-1-k) {
		return nil, errSnapshotBinary
	}
	js, rest := data[1+k:1+k+int(n)], data[1+k+int(n):]
	if err := json.Unmarshal(js, &sn); err != nil {
		return nil, fmt.Errorf("window: snapshot: %w", err)
	}
	if sn.V != SnapshotVersion {
		return nil, fmt.Errorf("%w: %d, not %d", ErrSnapshotVersion, sn.V, SnapshotVersion)
	}
	var err error
	for _, items := range [][]snapItem{sn.Head, sn.Tail} {
		for i := range items {
			if rest, err = readItemMessages(rest, &items[i]); err != nil {
				return nil, err
			}
		}
	}
	if len(rest) != 0 {
		return nil, errSnapshotBinary
	}
	s, err := NewState(sn.Policy, sn.Budget, sz)
	if err != nil {
		return nil, fmt.Errorf("window: snapshot: %w", err)
	}
	s.lastSeq, s.headDone, s.blocks = sn.LastSeq, sn.HeadDone, sn.Blocks
	s.headTok, s.memTok, s.tailTok, s.memStale, s.injected = sn.HeadTok, sn.MemTok, sn.TailTok, sn.MemStale, sn.Injected
	s.memMsg, s.recalls, s.turnSeq = sn.MemMsg, sn.Recalls, sn.TurnSeq
	s.messages, s.threadTokens, s.dropped = sn.Messages, sn.ThreadTokens, sn.Dropped
	s.compactions, s.reflections, s.lastCompacted = sn.Compactions, sn.Reflections, sn.LastCompacted
	for _, id := range sn.Pending {
		s.pending[id] = true
	}
	if s.head, err = decodeItems(sn.Head); err != nil {
		return nil, err
	}
	if s.tail, err = decodeItems(sn.Tail); err != nil {
		return nil, err
	}
	for _, it := range s.tail {
		s.bySeq[it.Seq] = it
	}
	s.indexCalls()
	if sn.Out != nil {
		s.out = sn.Out
	} else {
		s.out = render(s.head, s.memMsg, s.tail, recallMessages(s.recalls))
	}
	return s, nil
}

func decodeItems(items []snapItem) ([]*Item, error) {
	out := make([]*Item, len(items))
	for i, si := range items {
		if si.Msg == nil {
			return nil, fmt.Errorf("window: snapshot: item %d has no message", si.Seq)
		}
		it := &Item{Seq: si.Seq, Ref: si.Ref, At: si.At, Msg: si.Msg, Form: si.Form, Tokens: si.Tokens,
			Boundary: si.Boundary, Tools: si.Tools, Post: si.Post, PostTokens: si.PostTokens}
		if si.Out != nil {
			it.Out = *si.Out
		} else {
			it.Out = *si.Msg
		}
		out[i] = it
	}
	return out, nil
}

// render is rebuildOut's rendering of head, memory and tail, with each
// recalled block right before the message it was recalled for.
func render(head []*Item, mem *message.Message, tail []*Item, recalls map[int64]*message.Message) []message.Message {
	out := make([]message.Message, 0, len(head)+1+len(tail)+len(recalls)+16)
	for _, it := range head {
		if r := recalls[it.Seq]; r != nil {
			out = append(out, *r)
		}
		out = append(out, it.Out)
	}
	if mem != nil {
		out = append(out, *mem)
	}
	for _, it := range tail {
		if it.Form != Dropped {
			if r := recalls[it.Seq]; r != nil {
				out = append(out, *r)
			}
			out = append(out, it.Out)
		}
		out = append(out, it.Post...)
	}
	return out
}

func sameMessages(a, b []message.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}
