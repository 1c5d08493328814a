package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
)

// upstreamStream returns what the strict fake upstream streams for reply.
func upstreamStream(t testing.TB, reply fakellm.Reply) []byte {
	t.Helper()
	s := fakellm.New()
	s.Enqueue(reply)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{"model":"m","input":"hi","stream":true}`))
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("upstream %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// relayStream runs a stream through one round's state the way relay does
// and returns what the client gets, the last kind seen and the round's
// message.
func relayStream(d *responsesDialect, data []byte) ([]byte, evKind, message.Message, error) {
	st := d.newStream(&streamCarry{})
	rd := newSSEReader(bytes.NewReader(data))
	var out []byte
	last := evPass
	for {
		ev, err := rd.next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			return out, last, message.Message{}, err
		}
		b, kind := st.event(ev)
		out = append(out, b...)
		last = kind
	}
	m, err := st.message()
	return out, last, m, err
}

// The client's stream: Mneme's id everywhere, recall calls left out and
// the items after them renumbered, sequence numbers without a gap, and the
// terminal event's output what the client was shown.
func TestResponsesStreamRewrite(t *testing.T) {
	up := upstreamStream(t, fakellm.Reply{Text: "Looking.", ToolCalls: []fakellm.ToolCall{
		{ID: "call_r", Name: ToolSearch, Arguments: `{"query":"x"}`},
		{ID: "call_c", Name: "read_file", Arguments: `{"arg":"a"}`},
	}})
	d := &responsesDialect{id: "resp_mneme"}
	out, kind, msg, err := relayStream(d, up)
	if err != nil || kind != evEnd {
		t.Fatalf("kind %v err %v", kind, err)
	}
	if ids := msg.ToolCallIDs(); len(ids) != 2 {
		t.Fatalf("the round's message has calls %v, want both (the log keeps the recall call)", ids)
	}
	rd := newSSEReader(bytes.NewReader(out))
	seq := int64(-1)
	var final struct {
		ID     string            `json:"id"`
		Output []json.RawMessage `json:"output"`
	}
	for {
		ev, err := rd.next()
		if err != nil {
			break
		}
		var e struct {
			Type        string          `json:"type"`
			Seq         int64           `json:"sequence_number"`
			OutputIndex *int            `json:"output_index"`
			Response    json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(ev.data, &e); err != nil {
			t.Fatalf("event %q: %v", ev.data, err)
		}
		if e.Seq != seq+1 {
			t.Fatalf("sequence_number %d after %d", e.Seq, seq)
		}
		seq = e.Seq
		if e.OutputIndex != nil && *e.OutputIndex > 1 {
			t.Fatalf("output_index %d: the recall call was not taken out", *e.OutputIndex)
		}
		if bytes.Contains(ev.data, []byte(ToolSearch)) {
			t.Fatalf("the client sees the recall call: %s", ev.data)
		}
		if e.Response != nil {
			_ = json.Unmarshal(e.Response, &final)
			if final.ID != "resp_mneme" {
				t.Fatalf("%s carries id %q", e.Type, final.ID)
			}
		}
	}
	if len(final.Output) != 2 {
		t.Fatalf("terminal output has %d items, want the message and the client's call", len(final.Output))
	}
}

// FuzzResponsesStream feeds any byte stream through the SSE reader and the
// Responses stream state: no panic, every event given to the client is an
// event, and the round's message (when it decodes) encodes back.
func FuzzResponsesStream(f *testing.F) {
	f.Add(upstreamStream(f, fakellm.Reply{Text: "Hello there, this is a reply."}))
	f.Add(upstreamStream(f, fakellm.Reply{Text: "x", ToolCalls: []fakellm.ToolCall{{Name: ToolSearch, Arguments: `{"query":"q"}`}, {Name: "f", Arguments: `{}`}}}))
	full := upstreamStream(f, fakellm.Reply{Text: "cut short", ToolCalls: []fakellm.ToolCall{{Name: "f", Arguments: `{"a":1}`}}})
	f.Add(full[:len(full)*2/3]) // a stream cut mid-event
	f.Add([]byte("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":3,\"item\":{\"type\":\"function_call\",\"name\":\"mneme_read\"}}\n\n"))
	f.Add([]byte("data: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"x\",\"sequence_number\":9}\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &responsesDialect{id: "resp_fuzz"}
		out, _, msg, err := relayStream(d, data)
		if err == nil {
			if _, err := message.EncodeResponsesOutput(msg); err != nil {
				t.Fatalf("the round's message does not encode: %v", err)
			}
		}
		rd := newSSEReader(bytes.NewReader(out))
		for {
			ev, err := rd.next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("the client's stream does not parse: %v: %q", err, out)
				}
				break
			}
			if len(ev.raw) == 0 {
				t.Fatal("an empty event")
			}
		}
	})
}
