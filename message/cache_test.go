package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// checkCacheDecode fails unless decoding data through c, cold and then
// warm, gives what the uncached decoder gives: the same messages, or the
// same error.
func checkCacheDecode(t *testing.T, c *Cache, data []byte, plain, cached func([]byte) ([]Message, error)) []Message {
	t.Helper()
	want, werr := plain(data)
	for round := range 2 {
		got, err := cached(data)
		if fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("round %d: error %v, uncached %v (input %q)", round, err, werr, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: cached decode differs\n got %#v\nwant %#v\n(input %q)", round, got, want, data)
		}
	}
	return want
}

// checkCacheEncode fails unless encoding ms through c, cold and then warm,
// gives the uncached encoder's bytes or error.
func checkCacheEncode(t *testing.T, c *Cache, ms []Message) {
	t.Helper()
	want, werr := EncodeOpenAIMessages(ms)
	for round := range 2 {
		got, err := c.EncodeOpenAIMessages(ms)
		if fmt.Sprint(err) != fmt.Sprint(werr) || !bytes.Equal(got, want) {
			t.Fatalf("round %d: cached encode %q, %v\nuncached %q, %v", round, got, err, want, werr)
		}
		// Appended to a body: after what it holds, which an error leaves.
		got, err = c.AppendOpenAIMessages([]byte(`{"messages":`), ms)
		if fmt.Sprint(err) != fmt.Sprint(werr) || string(got) != `{"messages":`+string(want) {
			t.Fatalf("round %d: appended %q, %v\nuncached %q, %v", round, got, err, want, werr)
		}
	}
}

func FuzzCacheOpenAI(f *testing.F) {
	seedGolden(f, "openai", func(b []byte) []byte { return b })
	c := NewCache(1 << 16) // small: generations turn during the run
	f.Fuzz(func(t *testing.T, data []byte) {
		ms := checkCacheDecode(t, c, data, DecodeOpenAIMessages, c.DecodeOpenAIMessages)
		if ms != nil {
			checkCacheEncode(t, c, ms)
		}
	})
}

func FuzzCacheAnthropic(f *testing.F) {
	seedGolden(f, "anthropic", func(b []byte) []byte {
		var req anthropicRequest
		if err := json.Unmarshal(b, &req); err != nil {
			f.Fatal(err)
		}
		return req.Messages
	})
	c := NewCache(1 << 16)
	f.Fuzz(func(t *testing.T, data []byte) {
		ms := checkCacheDecode(t, c, data, DecodeAnthropicMessages, c.DecodeAnthropicMessages)
		if ms != nil {
			checkCacheEncode(t, c, ms)
		}
	})
}

// TestCacheDecodeMixed: an array whose messages were seen in other
// arrays, in other places, beside new ones and broken ones.
func TestCacheDecodeMixed(t *testing.T) {
	c := NewCache(0)
	a := `{"role":"user","content":"a"}`
	b := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":\"}\\\"\"}"}}]}`
	r := `{"role":"tool","tool_call_id":"c1","content":"out \"quoted\" {"}`
	for _, in := range []string{
		"[" + a + "]",
		"[" + a + "," + b + "," + r + "]",
		"[ " + a + " ,\n" + b + "\t,\r" + r + " , " + a + " ]",
		"[" + b + "," + r + "]",
		"[" + a + "," + a[:len(a)-1] + "]",                     // a truncated copy of a seen message
		"[" + a + "," + a + "x]",                               // a seen message then junk
		"[" + a + "," + `{"role":"user","content":"a"}}` + "]", // a seen message, a brace too many
		"[" + a + "," + `{"role":"user","content":1}` + "]",
		"[" + a + "," + `{"role":"user","role":"user","content":"a"}` + "]",
		"[" + a + "]  x",
		"[" + a + ",",
		"{}",
	} {
		checkCacheDecode(t, c, []byte(in), DecodeOpenAIMessages, c.DecodeOpenAIMessages)
	}
}

// TestCacheEncodeSeesEveryField: a message that differs from one encoded
// before in any field the encoder reads is encoded afresh. It fails when
// a field is added to Message, Part or Wire: hashMessage and sameEncoding
// must read it (or encoding must be shown not to) before cacheFields is
// raised.
func TestCacheEncodeSeesEveryField(t *testing.T) {
	cacheFields := map[string]int{"Message": 6, "Part": 12, "Wire": 6}
	for _, v := range []any{Message{}, Part{}, Wire{}} {
		typ := reflect.TypeOf(v)
		if got, want := typ.NumField(), cacheFields[typ.Name()]; got != want {
			t.Errorf("%s has %d fields, the cache knows %d: hash and compare the new field in cache.go", typ.Name(), got, want)
		}
	}
	base := func() Message {
		return Message{Role: Assistant, Name: "n", Wire: Wire{API: "openai", Form: "parts", Extra: map[string]json.RawMessage{"x": json.RawMessage(`1`)}},
			Parts: []Part{
				{Type: Text, Text: "t", Wire: Wire{Extra: map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`)}}},
				{Type: ToolCall, ToolCallID: "c1", ToolName: "f", Arguments: `{}`},
			}}
	}
	variants := map[string]func(*Message){
		"role":           func(m *Message) { m.Role = User },
		"name":           func(m *Message) { m.Name = "o" },
		"wire api":       func(m *Message) { m.Wire.API = "" },
		"wire form":      func(m *Message) { m.Wire.Form = "string" },
		"wire role":      func(m *Message) { m.Wire.Role = "developer" },
		"wire extra":     func(m *Message) { m.Wire.Extra["x"] = json.RawMessage(`2`) },
		"wire extra key": func(m *Message) { m.Wire.Extra = map[string]json.RawMessage{"y": json.RawMessage(`1`)} },
		"wire item":      func(m *Message) { m.Wire.Item = map[string]json.RawMessage{"id": json.RawMessage(`"i"`)} },
		"text":           func(m *Message) { m.Parts[0].Text = "u" },
		"part extra":     func(m *Message) { m.Parts[0].Wire.Extra = nil },
		"part type":      func(m *Message) { m.Parts[0].Wire.Type = "input_text" },
		"call id":        func(m *Message) { m.Parts[1].ToolCallID = "c2" },
		"tool name":      func(m *Message) { m.Parts[1].ToolName = "g" },
		"arguments":      func(m *Message) { m.Parts[1].Arguments = `{"a":1}` },
		"raw form":       func(m *Message) { m.Parts[1].Wire.Form = "json" },
		"parts":          func(m *Message) { m.Parts = m.Parts[:1] },
		"image":          func(m *Message) { m.Parts[0] = Part{Type: Image, ImageURL: "http://x/i.png", Detail: "low"} },
		"detail":         func(m *Message) { m.Parts[0] = Part{Type: Image, ImageURL: "http://x/i.png", Detail: "high"} },
	}
	c := NewCache(0)
	checkCacheEncode(t, c, []Message{base()})
	for name, change := range variants {
		m := base()
		change(&m)
		want, werr := EncodeOpenAIMessages([]Message{m})
		got, err := c.EncodeOpenAIMessages([]Message{m})
		if fmt.Sprint(err) != fmt.Sprint(werr) || !bytes.Equal(got, want) {
			t.Errorf("%s: cached %q, %v; uncached %q, %v", name, got, err, want, werr)
		}
		if sameEncoding(&m, &[]Message{base()}[0]) {
			t.Errorf("%s: sameEncoding misses the change", name)
		}
	}
	// Time and Meta are not encoded: the same entry serves.
	m := base()
	m.Time, m.Meta = time.Now(), map[string]string{"k": "v"}
	if b := base(); !sameEncoding(&m, &b) {
		t.Error("Time or Meta made a message encode differently")
	}
	// A message changed in place after it was encoded is not served the
	// old encoding (the cache keeps its own copy).
	ms := []Message{base()}
	checkCacheEncode(t, c, ms)
	ms[0].Parts[0].Text = "changed in place"
	checkCacheEncode(t, c, ms)
}

// TestCacheBounded: the cache drops what it holds beyond its size.
func TestCacheBounded(t *testing.T) {
	c := NewCache(1 << 12)
	for i := range 1000 {
		in := fmt.Sprintf(`[{"role":"user","content":"message %d %s"}]`, i, bytes.Repeat([]byte("x"), 100))
		if _, err := c.DecodeOpenAIMessages([]byte(in)); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.cur.dec) + len(c.old.dec); n > 40 {
		t.Fatalf("%d entries kept in a 4 KB cache", n)
	}
}

// BenchmarkCache: a resend request's 58 messages decoded, and its window
// encoded, plain and through a warm cache (every message seen before).
func BenchmarkCache(b *testing.B) {
	data := benchRequest(58)
	ms, err := DecodeOpenAIMessages(data)
	if err != nil {
		b.Fatal(err)
	}
	c := NewCache(0)
	if _, err := c.DecodeOpenAIMessages(data); err != nil {
		b.Fatal(err)
	}
	if _, err := c.EncodeOpenAIMessages(ms); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		f    func() error
	}{
		{"decode/plain", func() error { _, err := DecodeOpenAIMessages(data); return err }},
		{"decode/cached", func() error { _, err := c.DecodeOpenAIMessages(data); return err }},
		{"encode/plain", func() error { _, err := EncodeOpenAIMessages(ms); return err }},
		{"encode/cached", func() error { _, err := c.EncodeOpenAIMessages(ms); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCacheScoped: what one scope put in the cache is not a hit for
// another (the entries double), and is for the same scope (they do not).
func TestCacheScoped(t *testing.T) {
	c := NewCache(0)
	data := benchRequest(6)
	count := func() (int, int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.cur.dec), len(c.cur.enc)
	}
	for i, scope := range []string{"a", "a", "b"} {
		ms, err := c.For(scope).DecodeOpenAIMessages(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.For(scope).EncodeOpenAIMessages(ms); err != nil {
			t.Fatal(err)
		}
		d, e := count()
		want := 6
		if i == 2 {
			want = 12
		}
		if d != want || e != want {
			t.Fatalf("after scope %q (%d): %d decoded and %d encoded entries, want %d", scope, i, d, e, want)
		}
	}
}

// FuzzCacheElems: decoding with the elements a caller found
// (DecodeOpenAIElems) gives what the uncached decoder gives, whether the
// elements are right, hashed wrong, cut short or run long.
func FuzzCacheElems(f *testing.F) {
	seedGolden(f, "openai", func(b []byte) []byte { return b })
	f.Add([]byte(`[{"role":"user","content":"a"} , {"role":"user","content":"b"},1,{"role":"assistant","content":"c"}]`))
	c := NewCache(1 << 16)
	f.Fuzz(func(t *testing.T, data []byte) {
		right := topElems(c, data)
		variants := [][]Elem{right, nil}
		for v := range 3 {
			es := make([]Elem, len(right))
			for i, e := range right {
				switch v {
				case 0: // hashed wrong
					e.Hash ^= 1
				case 1: // cut short
					if len(e.Raw) > 1 {
						e.Raw = e.Raw[:len(e.Raw)-1]
					}
				case 2: // running on
					e.Raw = e.Raw[:min(cap(e.Raw), len(e.Raw)+2)]
				}
				es[i] = e
			}
			variants = append(variants, es)
		}
		if len(right) > 1 {
			variants = append(variants, right[1:], right[:1], append([]Elem{right[1]}, right...))
		}
		for _, es := range variants {
			checkCacheDecode(t, c, data, DecodeOpenAIMessages, func(d []byte) ([]Message, error) {
				return c.For("").DecodeOpenAIElems(d, es)
			})
		}
	})
}

// topElems finds the objects of a top-level JSON array, as a caller
// splitting its body would, hashed by c.
func topElems(c *Cache, d []byte) []Elem {
	i := 0
	for i < len(d) && (d[i] == ' ' || d[i] == '\n' || d[i] == '\t' || d[i] == '\r') {
		i++
	}
	if i >= len(d) || d[i] != '[' {
		return nil
	}
	var out []Elem
	for i++; i < len(d); {
		switch d[i] {
		case '{', '[':
			end := skipObject(d, i)
			if d[i] == '{' {
				out = append(out, Elem{Raw: d[i:end:len(d)], Hash: c.Hash(d[i:end])})
			}
			i = end
		case '"':
			i = skipStr(d, i)
		case ']':
			return out
		default:
			i++
		}
	}
	return out
}
