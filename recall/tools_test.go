package recall_test

import (
	"encoding/json"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/token"
)

// The recall tools' schemas must cost no more than the engine reserves for
// them. ToolsTokens charges a tools preamble once per request; a request
// that declares tools of its own pays it anyway, so the recall tools'
// own cost is what they add on top of it.
func TestRecallToolsFitTheirReservation(t *testing.T) {
	c, err := token.Get(token.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []recall.Shape{recall.OpenAI, recall.Anthropic, recall.MCP} {
		defs := recall.Definitions(shape)
		if len(defs) != 2 {
			t.Fatalf("%s: %d definitions", shape, len(defs))
		}
		own := token.ToolsTokens(c, defs) - token.ToolsPreambleTokens
		alone := token.ToolsTokens(c, defs)
		t.Logf("%s: recall tools cost %d tokens on top of other tools, %d alone (with the tools preamble)", shape, own, alone)
		if own > mneme.RecallToolsTokens {
			t.Errorf("%s: recall tools cost %d tokens, more than the %d reserved", shape, own, mneme.RecallToolsTokens)
		}
		for _, d := range defs {
			if !json.Valid(d) {
				t.Errorf("%s: invalid JSON %s", shape, d)
			}
		}
	}
}
