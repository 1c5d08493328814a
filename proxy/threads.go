package proxy

import (
	"context"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/window"
)

// Thread identity: the resend dedup, the projection of a log as the
// client saw it and the branches are the engine's (mneme.AppendHistory);
// the proxy names the thread and hands the decoded history over, whatever
// dialect decoded it.

// Meta keys the proxy sets on the messages it records.
const (
	// MetaRecall marks a message the client never saw: a recall round of a
	// non-streamed answer, or the result of a recall tool call.
	MetaRecall = mneme.MetaRecall
	// MetaPartial marks a reply whose stream broke before its end.
	MetaPartial = "mneme_partial"
)

// Modes of the X-Mneme-Mode header.
const (
	ModeResend = "resend"
	ModeAppend = "append"
)

// DeriveThreadID returns the id of a thread whose client names none; see
// mneme.DeriveThreadID.
func DeriveThreadID(tenant string, msgs []message.Message) string {
	return mneme.DeriveThreadID(tenant, msgs)
}

// session is one request's place in its thread.
type session struct {
	tenant string
	id     string // the thread the turn writes to (set again after a record)
	turn   *mneme.Turn
	parent string // set when the dialect forked the thread itself (Responses)
}

// forkedFrom names the parent of the branch the request landed on.
func (s *session) forkedFrom() string {
	if s.parent != "" {
		return s.parent
	}
	return s.turn.ForkedFrom()
}

// open places what is new of msgs on the thread (all of them in append
// mode) and returns the window for the next model call. The messages are
// written with the reply, in one durable append, or alone when the turn
// closes without one (mneme.HistoryOptions.Defer): every request that
// was answered or failed is in the log, never a reply without its
// request, and nothing the client was told is lost (I1).
func (p *Proxy) open(ctx context.Context, tenant, id, mode string, msgs []message.Message, opts mneme.WindowOptions) (*session, *window.Window, error) {
	turn, err := p.m.Thread(tenant, id).AppendHistory(ctx, msgs, mneme.HistoryOptions{Window: opts, Append: mode == ModeAppend, Defer: true})
	if err != nil {
		return nil, nil, err
	}
	return &session{tenant: tenant, id: turn.Thread(), turn: turn}, turn.Window, nil
}
