package mneme

import (
	"encoding/hex"
	"testing"

	"github.com/mnemehq/mneme/message"
)

// The units' hashes name branches (branchID): a change of the canonical
// bytes would lose every existing branch. These are the hashes of a
// history with each kind of part, as the first version computed them.
func TestProjectionHashesAreStable(t *testing.T) {
	call := func(id, args string) message.Part {
		return message.Part{Type: message.ToolCall, ToolCallID: id, ToolName: "grep", Arguments: args}
	}
	msgs := []message.Message{
		{Role: message.System, Parts: []message.Part{{Type: message.Text, Text: "be brief"}}},
		{Role: message.User, Parts: []message.Part{{Type: message.Text, Text: "fix <INV-1> & go"}, {Type: message.Image, ImageURL: "http://x/y.png", Raw: []byte(`{"detail": "low"}`)}}},
		{Role: message.Assistant, Parts: []message.Part{{Type: message.Text, Text: "looking"}, call("c1", `{"q":"x","a":[1,2.50]}`), call("c2", `{ "b": 1, "a": "é" }`), call("c3", `not json`)}},
		{Role: message.Tool, Parts: []message.Part{{Type: message.ToolResult, ToolCallID: "c1", Content: []message.Part{{Type: message.Text, Text: "line 1\n"}, {Type: message.Text, Text: "line 2"}}}}},
		{Role: message.Tool, Parts: []message.Part{{Type: message.ToolResult, ToolCallID: "c2", IsError: true, Content: []message.Part{{Type: message.Text, Text: "boom"}}}}},
		{Role: message.Tool, Parts: []message.Part{{Type: message.ToolResult, ToolCallID: "c3", Content: []message.Part{{Type: message.Text, Text: "ok"}}}}},
		{Role: message.Assistant, Parts: []message.Part{{Type: message.Reasoning, Text: "hm", Signature: "sig", Raw: []byte(`{"x":1}`)}, {Type: message.Opaque, Raw: []byte(`{"z":1, "y":[true,null]}`)}, {Type: message.Text, Text: "done"}}},
	}
	u := requestProjection(msgs)
	var got []string
	for _, x := range u.result() {
		got = append(got, string(x.kind)+hex.EncodeToString(x.h[:]))
	}
	sk := systemKey(u.system)
	got = append(got, "S"+hex.EncodeToString(sk[:]))
	want := []string{"U0c845a101dd24803ea140a14dc533fa7", "Ad8612ad008e246676989e99800b9a62c", "Tcbb89babc11518d0d94b6d1ff964d6ab", "Ad7c0eecebaeec19c5d91bc226d8706f9", "Sccb664033d0389a43ce4ffae5837f5c2"}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("unit %d: %s, want %s", i, got[i], want[i])
		}
	}
}
