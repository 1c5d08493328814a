package mneme

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// ExportLine is one line of a thread's JSONL export, the format of `mneme
// export`: an event, with a message event's message in OpenAI chat shape
// (Message, or Messages when one logged message maps to several OpenAI
// messages) and, for a lossless import, in Mneme's own shape (Mneme).
type ExportLine struct {
	Seq      int64             `json:"seq"`
	Kind     store.Kind        `json:"kind"`
	At       time.Time         `json:"at"`
	Ref      string            `json:"ref,omitempty"`
	Tokens   int               `json:"tokens,omitempty"`
	Message  json.RawMessage   `json:"message,omitempty"`
	Messages []json.RawMessage `json:"messages,omitempty"`
	Mneme    *message.Message  `json:"mneme,omitempty"`
	Data     json.RawMessage   `json:"data,omitempty"`
}

// ExportEvent renders one event as an export line.
func ExportEvent(ev store.Event) (ExportLine, error) {
	l := ExportLine{Seq: ev.Seq, Kind: ev.Kind, At: ev.At, Ref: ev.Ref, Tokens: ev.Tokens, Data: ev.Data}
	if ev.Message != nil {
		oa, err := message.EncodeOpenAI(*ev.Message)
		if err != nil {
			return l, fmt.Errorf("seq %d: %w", ev.Seq, err)
		}
		if len(oa) == 1 {
			l.Message = oa[0]
		} else {
			l.Messages = oa
		}
		l.Mneme = ev.Message
	}
	return l, nil
}

// WriteExport writes the thread's whole log to out as JSONL, 1,000 events
// at a time, and returns how many events it wrote.
func WriteExport(ctx context.Context, st store.Log, tenant, thread string, out io.Writer) (int, error) {
	bw := bufio.NewWriter(out)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	for from := int64(1); ; {
		evs, err := st.Load(ctx, tenant, thread, from, 1000)
		if err != nil {
			return n, err
		}
		for _, ev := range evs {
			l, err := ExportEvent(ev)
			if err != nil {
				return n, err
			}
			if err := enc.Encode(l); err != nil {
				return n, err
			}
			n++
		}
		if len(evs) < 1000 {
			break
		}
		from = evs[len(evs)-1].Seq + 1
	}
	return n, bw.Flush()
}

// ReadExport parses an export back into events, in order, checking that
// the seqs are gapless from 1. Refs are kept only with keepRefs (refs are
// unique per tenant: importing into the store they came from needs fresh
// ones). A message event is taken from its lossless "mneme" form when
// present, else decoded from its OpenAI shape.
func ReadExport(in io.Reader, keepRefs bool) ([]store.Event, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	var evs []store.Event
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l ExportLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if !l.Kind.Valid() {
			return nil, fmt.Errorf("line %d: unknown kind %q", line, l.Kind)
		}
		if l.Seq != int64(len(evs)+1) {
			return nil, fmt.Errorf("line %d: seq %d, want %d (the log must be gapless)", line, l.Seq, len(evs)+1)
		}
		ev := store.Event{Kind: l.Kind, At: l.At, Tokens: l.Tokens, Data: l.Data}
		if keepRefs {
			ev.Ref = l.Ref
		}
		if l.Kind == store.KindMessage {
			switch {
			case l.Mneme != nil:
				ev.Message = l.Mneme
			case len(l.Message) > 0:
				m, err := message.DecodeOpenAI(l.Message)
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", line, err)
				}
				ev.Message = &m
			default:
				return nil, fmt.Errorf("line %d: message event without a message", line)
			}
		}
		evs = append(evs, ev)
	}
	return evs, sc.Err()
}
