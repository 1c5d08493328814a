package backend

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// roundTrip is what NormalizeMessage stands for.
func roundTrip(m *message.Message) (*message.Message, error) {
	s, err := EncodeMessage(m)
	if err != nil {
		return nil, err
	}
	return DecodeMessage(s)
}

func checkNormalize(t *testing.T, m message.Message) {
	t.Helper()
	want, werr := roundTrip(&m)
	got, err := NormalizeMessage(&m)
	if (err != nil) != (werr != nil) {
		t.Fatalf("%#v: NormalizeMessage error %v, round trip %v", m, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("NormalizeMessage differs from the round trip\n  in %#v\n got %#v\nwant %#v", m, got, want)
	}
}

// TestNormalizeMessage: NormalizeMessage gives what the stored form gives
// back, exactly (reflect.DeepEqual), on messages that exercise what the
// stored form drops or changes, and refuses what it refuses. It fails when
// Message, Part or Wire gains a field (see normalizeFields).
func TestNormalizeMessage(t *testing.T) {
	normalizeFields := map[string]int{"Message": 6, "Part": 12, "Wire": 6}
	for _, v := range []any{message.Message{}, message.Part{}, message.Wire{}} {
		typ := reflect.TypeOf(v)
		if got, want := typ.NumField(), normalizeFields[typ.Name()]; got != want {
			t.Errorf("%s has %d fields, NormalizeMessage knows %d: normalize the new field as the stored form does", typ.Name(), got, want)
		}
	}
	paris := time.FixedZone("CET", 3600)
	raws := []json.RawMessage{nil, {}, json.RawMessage(`{ "b" : [1, 2 ],"a":"x y"}`), json.RawMessage(`"<&>\u2028"`), json.RawMessage(`{"a":`), json.RawMessage(` 1 `), json.RawMessage("null")}
	times := []time.Time{{}, time.Now(), time.Now().UTC(), time.Date(2026, 1, 2, 3, 4, 5, 6, paris), time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	wires := []message.Wire{{}, {Extra: map[string]json.RawMessage{}}, {API: "openai"}, {API: "anthropic", Form: "parts", Role: "developer", Type: "input_text", Extra: map[string]json.RawMessage{}, Item: map[string]json.RawMessage{}}}
	for _, r := range raws {
		wires = append(wires, message.Wire{Extra: map[string]json.RawMessage{"cache_control": r}}, message.Wire{API: "openai", Item: map[string]json.RawMessage{"id": r, "status": json.RawMessage(`"done"`)}})
	}
	partsOf := func(r json.RawMessage, w message.Wire) [][]message.Part {
		return [][]message.Part{
			nil, {},
			{{Type: message.Text, Text: "héllo <b>&</b> \u2028 \"q\"\n", Wire: w}},
			{{Type: message.Opaque, Raw: r, Wire: w}},
			{{Type: message.ToolCall, ToolCallID: "c1", ToolName: "f", Arguments: `{"a": 1}`}, {Type: message.Image, ImageURL: "http://x/i.png", Detail: "low", Raw: r}},
			{{Type: message.ToolResult, ToolCallID: "c1", IsError: true, Content: []message.Part{}}},
			{{Type: message.ToolResult, ToolCallID: "c1", Content: []message.Part{{Type: message.Text, Text: "out", Content: []message.Part{}, Wire: w}, {Type: message.Image, Raw: r}}}},
			{{Type: message.Reasoning, Text: "hmm", Signature: "sig", Raw: r}},
		}
	}
	n := 0
	for _, r := range raws {
		for _, w := range wires {
			for _, ps := range partsOf(r, w) {
				for ti, tm := range times {
					for _, meta := range []map[string]string{nil, {}, {"k": "v", "mneme_recall": "true"}} {
						if (ti+n)%3 != 0 && meta != nil {
							continue // keep the product small
						}
						m := message.Message{Role: message.Assistant, Name: fmt.Sprint(n % 2), Time: tm, Meta: meta, Parts: ps, Wire: w}
						checkNormalize(t, m)
						n++
					}
				}
			}
		}
	}
	t.Logf("%d messages", n)
}

func FuzzNormalizeMessage(f *testing.F) {
	f.Add("text", "x", `{"a": 1}`, "cache_control", `{"type": "ephemeral"}`, int64(0))
	f.Add("opaque", "", ` [ 1 ] `, "k", ``, int64(1700000000123456789))
	f.Fuzz(func(t *testing.T, typ, text, raw, key, val string, nanos int64) {
		w := message.Wire{Extra: map[string]json.RawMessage{key: json.RawMessage(val)}}
		if val == "" {
			w.Extra[key] = nil
		}
		m := message.Message{Role: message.User, Time: time.Unix(0, nanos).In(time.FixedZone("", int(nanos%50000))), Parts: []message.Part{
			{Type: message.PartType(typ), Text: text, Raw: json.RawMessage(raw), Wire: w, Content: []message.Part{{Type: message.Text, Raw: json.RawMessage(raw)}}},
		}}
		if CheckEvent(storeEvent(&m)) != nil {
			return // refused before it is encoded
		}
		checkNormalize(t, m)
	})
}

func storeEvent(m *message.Message) store.Event {
	return store.Event{Kind: store.KindMessage, Message: m}
}
