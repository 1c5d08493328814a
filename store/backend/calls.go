package backend

import (
	"iter"
	"sync"

	"github.com/mnemehq/mneme/message"
)

// ToolLookback bounds how far back, in seqs, a nameless tool result's call
// is looked for in its thread's log (the SQL backends' findCall).
const ToolLookback = 500

// The calls a CallCache keeps: at most callsPerThread a thread (its
// newest: an agent's results answer the calls of the message before
// them), for at most callThreads threads (past that, a thread taken at
// random is dropped, and its next tool result is looked up in the log).
// At most a few megabytes.
const (
	callsPerThread = 16
	callThreads    = 4096
)

// CallCache remembers the tool calls of the messages this process appended
// last to each thread, so that the tool result answering one in the
// thread's next append is named without reading the log. An agent's
// results come one append after their calls; reading the call back cost a
// query a tool result (a fifth of the CPU of SQLite's appends from 32
// threads of an agent transcript, and a round trip on PostgreSQL).
//
// An entry covers a run of seqs of its thread up to its last, all appended
// by this process one append after the other, and holds the tool calls the
// assistant messages in it make (the newest callsPerThread). A lookup at
// after == last that finds the call there has the name the log would give
// (the newest assistant message making that call, within ToolLookback);
// one that does not find it says nothing, and the caller reads the log. An append that does not follow the
// entry's last seq (another process appended, or a conflict) starts the
// entry again. DeleteThread calls Forget once its delete is committed; an
// append that committed before it and is remembered after it is not kept
// (gen). A thread deleted and made again by another process, up to the very
// seq this one last appended, can be named from its former self: the read
// of the log that this replaces, made before the group commit, has the same
// window, narrower.
type CallCache struct {
	mu  sync.Mutex
	gen uint64 // Forgets so far
	m   map[[2]string]*callRun
}

// callRun is a thread's run of appends up to seq last: the calls in it
// (all of them but those dropped past callsPerThread, the oldest).
type callRun struct {
	last  int64
	calls []call // oldest first; a message's in reverse (see Remember)
}

type call struct {
	seq      int64
	id, name string
}

// Gen returns the cache's generation, for Remember: an Append reads it
// before its commit.
func (c *CallCache) Gen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Lookup returns the name of tool call id in the thread's log up to seq
// after, and true when the cache knows it.
func (c *CallCache) Lookup(tenant, thread string, after int64, id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.m[[2]string{tenant, thread}]
	if r == nil || r.last != after {
		return "", false
	}
	for i := len(r.calls) - 1; i >= 0; i-- {
		k := r.calls[i]
		if k.seq <= after-ToolLookback {
			break
		}
		if k.id == id {
			return k.name, true
		}
	}
	return "", false
}

// Remember records the events an append committed to the thread as seqs
// after+1 on: msgs yields each event's message (nil for an event of
// another kind). gen is Gen's answer from before the commit.
func (c *CallCache) Remember(gen uint64, tenant, thread string, after int64, msgs iter.Seq[*message.Message]) {
	var calls []call
	last := after
	for m := range msgs {
		last++
		if m == nil || m.Role != message.Assistant {
			continue
		}
		// In reverse: Lookup reads newest first, and CallName takes a
		// message's first call of an id. It skips a call with no name (the
		// lookup goes on to an older message), and so does this.
		ps := m.ToolCalls()
		for j := len(ps) - 1; j >= 0; j-- {
			if p := ps[j]; p.ToolCallID != "" && p.ToolName != "" {
				calls = append(calls, call{seq: last, id: p.ToolCallID, name: p.ToolName})
			}
		}
	}
	key := [2]string{tenant, thread}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	r := c.m[key]
	switch {
	case r != nil && r.last == after:
		r.last = last
		r.calls = append(r.calls, calls...)
	case r != nil && r.last > after:
		return // a later append's, remembered first
	default:
		if c.m == nil {
			c.m = make(map[[2]string]*callRun)
		}
		for k := range c.m { // a map's order is random
			if len(c.m) < callThreads {
				break
			}
			delete(c.m, k)
		}
		r = &callRun{last: last, calls: calls}
		c.m[key] = r
	}
	if n := len(r.calls) - callsPerThread; n > 0 {
		// The newest are kept: a call found is still the newest of its id.
		r.calls = append(r.calls[:0:0], r.calls[n:]...)
	}
}

// Forget drops the thread's entry, and every remembering of an append
// committed before now.
func (c *CallCache) Forget(tenant, thread string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, [2]string{tenant, thread})
}
