package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/mnemehq/mneme/message"
)

// Streaming. Each upstream event is written to the client as soon as it
// is read, except the events of recall tool calls (left out) and, in a
// recall round, the end of the round (the next round's events follow in
// the same client stream). Nothing is buffered to wait for a decision: the
// decision to call the model again is taken at the round's finish event,
// when every call of the round is known.

// evKind says what an upstream event was.
type evKind int

const (
	evPass   evKind = iota // anything else
	evFinish               // carries the stop reason: every call of the round is known
	evDone                 // the stream's last event
	evEnd                  // both at once: the Responses API's terminal event
)

// sseEvent is one server-sent event as it came: raw holds its lines and the
// blank line that ends it.
type sseEvent struct {
	raw  []byte
	name string
	data []byte
}

// streamCarry is what one streamed round passes to the next.
type streamCarry struct {
	id     string // OpenAI: the id the client's stream started with
	blocks int    // Anthropic: content blocks the client has received
	round  int
}

// streamState follows one streamed round.
type streamState interface {
	// event reads one upstream event and returns what to send the client
	// (nil: nothing) and what it was.
	event(ev sseEvent) ([]byte, evKind)
	// finishNormal rewrites a finish event whose tool calls were all the
	// proxy's own into a normal end.
	finishNormal(out []byte) []byte
	// message returns the assistant message of the round so far.
	message() (message.Message, error)
	// carry records what the next round needs.
	carry(c *streamCarry)
}

// sseReader reads server-sent events.
type sseReader struct {
	br *bufio.Reader
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReaderSize(r, 32<<10)} }

// next returns the next event. An event cut by the end of the stream is an
// io.ErrUnexpectedEOF.
func (r *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			if len(ev.raw) == 0 && len(line) == 0 && errors.Is(err, io.EOF) {
				return ev, io.EOF
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return ev, err
		}
		ev.raw = append(ev.raw, line...)
		content := bytes.TrimRight(line, "\r\n")
		if len(content) == 0 {
			if len(ev.raw) == len(line) { // a stray blank line
				ev.raw = ev.raw[:0]
				continue
			}
			return ev, nil
		}
		switch {
		case bytes.HasPrefix(content, []byte("data:")):
			d := bytes.TrimPrefix(content[5:], []byte(" "))
			if ev.data != nil {
				ev.data = append(append(ev.data, '\n'), d...)
			} else {
				ev.data = append([]byte{}, d...)
			}
		case bytes.HasPrefix(content, []byte("event:")):
			ev.name = string(bytes.TrimSpace(content[6:]))
		}
	}
}

// sseEncode writes one event.
func sseEncode(name string, data []byte) []byte {
	var b []byte
	if name != "" {
		b = append(append(append(b, "event: "...), name...), '\n')
	}
	b = append(append(b, "data: "...), data...)
	return append(b, '\n', '\n')
}

// sseData returns the data of one encoded event.
func sseData(raw []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(raw, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if bytes.HasPrefix(line, []byte("data:")) {
			if out != nil {
				out = append(out, '\n')
			}
			out = append(out, bytes.TrimPrefix(line[5:], []byte(" "))...)
		}
	}
	return out
}

// relay streams the upstream's answer to the client, round after round
// while the model only calls the recall tools, and records the reply. It
// returns the status the client got.
func (x *exchange) relay(ctx context.Context, resp *http.Response) int {
	copyHeaders(x.w, resp)
	x.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(x.w)
	_ = rc.Flush()
	carry := &streamCarry{}
	var clientErr error
	write := func(b []byte) {
		if b == nil || clientErr != nil {
			return
		}
		if _, clientErr = x.w.Write(b); clientErr == nil {
			clientErr = rc.Flush()
		}
	}
	for {
		st := x.d.newStream(carry)
		rd := newSSEReader(resp.Body)
		again, done := false, false
		var readErr error
		for !done && clientErr == nil {
			ev, err := rd.next()
			if err != nil {
				readErr = err
				break
			}
			out, kind := st.event(ev)
			switch kind {
			case evFinish, evEnd:
				msg, err := st.message()
				if err == nil {
					calls, client := splitCalls(msg)
					switch {
					case len(calls) > 0 && client == 0 && x.rounds < x.p.cfg.RecallRounds:
						again = true
					case len(calls) > 0 && client == 0:
						out = st.finishNormal(out)
					}
				}
			}
			if kind == evDone || kind == evEnd {
				done = true
				if !again && x.recordStreamed(ctx, st, false) != nil {
					// In the log before the client sees the end, or the
					// client does not see the end: a reply the log could
					// not keep is not acknowledged (I1). The response is
					// aborted (not ended cleanly), so the client's SDK
					// reports a broken stream and the client retries.
					resp.Body.Close()
					panic(http.ErrAbortHandler)
				}
			}
			if again {
				continue // the round's end is not the client's
			}
			write(out)
		}
		resp.Body.Close()
		if !done || clientErr != nil {
			if !done {
				_ = x.recordStreamed(ctx, st, true) // already broken: a failure is logged
			}
			if readErr != nil && !errors.Is(readErr, io.EOF) {
				x.p.log.Warn("proxy: upstream stream broke", "thread", x.s.id, "err", readErr)
			}
			return http.StatusOK
		}
		if !again {
			return http.StatusOK
		}
		// A recall round: answer, then stream the next round on.
		msg, err := st.message()
		if err != nil {
			x.p.log.Error("proxy: reading a recall round", "thread", x.s.id, "err", err)
			return http.StatusOK
		}
		calls, _ := splitCalls(msg)
		results, err := x.answer(ctx, calls)
		if err != nil {
			x.p.log.Error("proxy: recall", "thread", x.s.id, "err", err)
			return http.StatusOK
		}
		x.rounds++
		st.carry(carry)
		if x.win, err = x.s.turn.Continue(ctx, append([]message.Message{msg}, results...)); err != nil {
			x.p.log.Error("proxy: recall window", "thread", x.s.id, "err", err)
			return http.StatusOK
		}
		body, err := x.d.build(x.req, x.win.Messages, x.offerRecall())
		if err == nil {
			resp, err = x.p.send(ctx, x.r, x.d.api(), x.d.path(), body)
		}
		if err == nil && resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			err = errors.New(resp.Status + ": " + string(b))
		}
		if err != nil {
			// Mid-stream: the status is sent; the client sees the stream end.
			x.p.log.Error("proxy: recall round upstream", "thread", x.s.id, "err", err)
			return http.StatusOK
		}
	}
}

// recordStreamed writes a streamed round's reply to the log, with the
// answers to the recall calls it made; a broken stream is marked partial.
// A failure is logged; the caller decides what the client sees of it.
func (x *exchange) recordStreamed(ctx context.Context, st streamState, partial bool) error {
	msg, err := st.message()
	if err != nil {
		x.p.log.Error("proxy: reading a streamed reply", "thread", x.s.id, "err", err)
		return err
	}
	if partial {
		msg.Meta = setMeta(msg.Meta, MetaPartial)
		if len(msg.Parts) == 0 {
			return nil // nothing came
		}
		return x.record(ctx, msg)
	}
	out := []message.Message{msg}
	if calls, _ := splitCalls(msg); len(calls) > 0 {
		results, err := x.answer(context.WithoutCancel(ctx), calls)
		if err != nil {
			x.p.log.Error("proxy: recall", "thread", x.s.id, "err", err)
		}
		out = append(out, results...)
	}
	return x.record(ctx, out...)
}
