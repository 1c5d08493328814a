package fulltext_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mnemehq/mneme/eval"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/fulltext"
	"github.com/mnemehq/mneme/store/storetest"
)

// TestIndexMessage: IndexMessage gives IndexBody(SearchText(m, at)) for
// every turn of the LoCoMo conversations, for the agent transcript and the
// synthetic conversation the benchmarks append, and for messages of every
// part type whose pieces meet at possessives, apostrophes and the empty.
func TestIndexMessage(t *testing.T) {
	at := time.Date(2023, 5, 8, 13, 56, 0, 0, time.FixedZone("x", 3600))
	check := func(m message.Message, at time.Time) {
		t.Helper()
		if got, want := fulltext.IndexMessage(m, at), fulltext.IndexBody(fulltext.SearchText(m, at)); got != want {
			t.Fatalf("IndexMessage(%+v) = %q, want %q", m, got, want)
		}
	}
	// The LoCoMo conversations (../shared/data: people's words, possessives,
	// other scripts), as the LoCoMo tests append them, beside the
	// transcripts the benchmarks append.
	convs, err := eval.LoadLoCoMo(storetest.LoCoMoDir)
	if err != nil {
		t.Fatal(err)
	}
	var locomo []message.Message
	for _, c := range convs {
		for _, turn := range c.Turns() {
			text := turn.Speaker + ": " + turn.Text
			if turn.BlipCaption != "" {
				text += " [image: " + turn.BlipCaption + "]"
			}
			m := message.NewText(message.User, text)
			m.Name = turn.Speaker
			locomo = append(locomo, m)
		}
	}
	n := 0
	for _, evs := range [][]message.Message{locomo, messagesOf(storetest.AgentThread(1000)), messagesOf(storetest.Synthetic(1000))} {
		for _, ev := range evs {
			check(ev, at)
			check(ev, time.Time{})
			n++
		}
	}
	if n < 4000 { // the LoCoMo turns and the two transcripts
		t.Fatalf("only %d messages checked", n)
	}
	for _, m := range []message.Message{
		{},
		{Role: message.User, Name: "Caroline", Parts: []message.Part{{Type: message.Text, Text: "it's Caroline'"}, {Type: message.Text, Text: "s book"}}},
		{Role: message.Assistant, Parts: []message.Part{
			{Type: message.Reasoning, Text: "Thinking about the user's files"},
			{Type: message.ToolCall, ToolCallID: "c1", ToolName: "read_file", Arguments: `{"path":"s's/x.go"}`},
			{Type: message.ToolCall, ToolCallID: "c2", ToolName: "", Arguments: ""},
			{Type: message.Image, ImageURL: "data:image/png;base64,AAAA", Raw: json.RawMessage(`{"type":"base64","data":"QUJD"}`)},
			{Type: message.Opaque, Raw: json.RawMessage(`{"type":"server_tool_use","name":"web_search"}`)},
		}},
		{Role: message.Tool, Parts: []message.Part{{Type: message.ToolResult, ToolCallID: "c1", Content: []message.Part{
			{Type: message.Text, Text: "Straße ÉCOLE naïve 東京 İstanbul"},
			{Type: message.Text, Text: ""},
			{Type: message.Image},
		}}}},
	} {
		check(m, at)
		check(m, time.Time{})
	}
}

// FuzzIndexMessage: any texts, as text, call and result parts and a name.
func FuzzIndexMessage(f *testing.F) {
	f.Add("Caroline's", "s", "read_file", `{"a":"b's"}`, "Name")
	f.Add("", "", "", "", "")
	f.Add("x\xffy", "’s", "İ", "Straße", "'")
	f.Fuzz(func(t *testing.T, a, b, name, args, who string) {
		m := message.Message{Role: message.Assistant, Name: who, Parts: []message.Part{
			{Type: message.Text, Text: a},
			{Type: message.ToolCall, ToolName: name, Arguments: args},
			{Type: message.ToolResult, Content: []message.Part{{Type: message.Text, Text: b}, {Type: message.Reasoning, Text: a + b}}},
		}}
		at := time.Unix(1700000000, 0)
		if got, want := fulltext.IndexMessage(m, at), fulltext.IndexBody(fulltext.SearchText(m, at)); got != want {
			t.Fatalf("IndexMessage = %q, want %q", got, want)
		}
	})
}

// messagesOf returns the messages of evs.
func messagesOf(evs []store.Event) []message.Message {
	var out []message.Message
	for _, ev := range evs {
		if ev.Message != nil {
			out = append(out, *ev.Message)
		}
	}
	return out
}
