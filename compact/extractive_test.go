package compact_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/token"
)

var update = flag.Bool("update", false, "rewrite golden files")

func counter(t testing.TB) token.Counter {
	c, err := token.Get(token.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("%s differs (-update to rewrite):\n%s", name, got)
	}
}

func TestExtractiveGolden(t *testing.T) {
	s := genSession(7, 12, 30)
	out, err := compact.Extractive{}.Observe(context.Background(), compact.Segment{From: 1, To: s.Entries[len(s.Entries)-1].Seq, Entries: s.Entries})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "extractive.golden", out.Text+"\n")
	// Deterministic: the same input gives the same bytes.
	again, _ := compact.Extractive{}.Observe(context.Background(), compact.Segment{Entries: s.Entries})
	if again.Text != out.Text {
		t.Fatal("extractive output is not deterministic")
	}
}

func TestExtractiveLines(t *testing.T) {
	at := time.Date(2026, 3, 2, 14, 5, 0, 0, time.UTC)
	en := func(seq int64, m message.Message) compact.Entry {
		return compact.Entry{Seq: seq, At: at, Msg: &m}
	}
	errResult := message.NewToolResult("c1", "running 12 tests\nok a\nFAIL TestTotal (0.01s)\npanic: runtime error: index out of range [3]")
	cases := []struct {
		name    string
		entries []compact.Entry
		want    []string
	}{
		{"user goal", []compact.Entry{en(4, message.NewText(message.User, "Fix INV-4401 in src/shop/checkout.go"))},
			[]string{`- 14:05 [high] User: "Fix INV-4401 in src/shop/checkout.go" [4–4]`}},
		{"user decision", []compact.Entry{en(5, message.NewText(message.User, "Let's use PostgreSQL 16, not MySQL."))},
			[]string{`[high] User decided: "Let's use PostgreSQL 16, not MySQL." [5–5]`}},
		{"user question", []compact.Entry{en(6, message.NewText(message.User, "Is retry_limit still 3?"))},
			[]string{`[medium] User asked: "Is retry_limit still 3?" [6–6]`}},
		{"tool call and error result", []compact.Entry{
			en(7, message.NewToolCalls("", message.Part{ToolCallID: "c1", ToolName: "run_tests", Arguments: `{"pkg":"./shop"}`})),
			en(8, errResult)},
			[]string{`[high] run_tests {"pkg":"./shop"} → 4 lines: "running 12 tests"; errors: "FAIL TestTotal (0.01s)" | "panic: runtime error: index out of range [3]" [7–8]`}},
		{"assistant done", []compact.Entry{en(9, message.NewText(message.Assistant, "Fixed the rounding in total(); all tests pass. Nice weather."))},
			[]string{`[done] Assistant: "Fixed the rounding in total(); all tests pass." [9–9]`}},
		{"assistant chatter dropped", []compact.Entry{en(10, message.NewText(message.Assistant, "Sure, happy to help with that."))}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := compact.Extractive{}.Observe(context.Background(), compact.Segment{Entries: tc.entries})
			if tc.want == nil && out.Text != "" {
				t.Fatalf("want nothing, got %q", out.Text)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.Text, w) {
					t.Errorf("missing %q in\n%s", w, out.Text)
				}
			}
			if tc.want != nil && !strings.HasPrefix(out.Text, "Date: 2026-03-02\n") {
				t.Errorf("no date header:\n%s", out.Text)
			}
		})
	}
}

// Every planted identifier, number, path, URL, error code and user
// decision of a long session survives extractive observation verbatim.
func TestFactRetention(t *testing.T) {
	s := genSession(42, 600, 40)
	var obs strings.Builder
	for _, seg := range segments(s.Entries, 60) {
		out, _ := compact.Extractive{}.Observe(context.Background(), seg)
		obs.WriteString(out.Text + "\n")
	}
	kept := 0
	for _, f := range s.Facts {
		if strings.Contains(obs.String(), f) {
			kept++
		} else {
			t.Errorf("fact lost: %q", f)
		}
	}
	t.Logf("fact retention (extractive, %d messages): %d/%d = %.1f%%", len(s.Entries), kept, len(s.Facts), 100*float64(kept)/float64(len(s.Facts)))
}

// Tool-heavy sessions compress at least 5x: tokens of the messages over
// tokens of their observations.
func TestCompressionRatio(t *testing.T) {
	c := counter(t)
	s := genSession(3, 400, 60)
	in, out := 0, 0
	for _, en := range s.Entries {
		in += token.MessageTokens(c, *en.Msg)
	}
	for _, seg := range segments(s.Entries, 60) {
		o, _ := compact.Extractive{Counter: c}.Observe(context.Background(), seg)
		out += c.Count(o.Text)
	}
	ratio := float64(in) / float64(out)
	t.Logf("compression (extractive, tool-heavy, %d messages): %d tokens -> %d tokens = %.1fx", len(s.Entries), in, out, ratio)
	if ratio < 5 {
		t.Fatalf("ratio %.1fx below 5x", ratio)
	}
}

func TestExtractiveMaxTokens(t *testing.T) {
	c := counter(t)
	s := genSession(9, 80, 20)
	for _, max := range []int{300, 800, 2000} {
		o, _ := compact.Extractive{Counter: c}.Observe(context.Background(), compact.Segment{Entries: s.Entries, MaxTokens: max})
		if n := c.Count(o.Text); n > max {
			t.Errorf("max %d: got %d tokens", max, n)
		}
		if !strings.Contains(o.Text, "[high]") {
			t.Errorf("max %d: high-priority lines dropped first:\n%s", max, o.Text)
		}
	}
}

func TestExtractiveReflectFits(t *testing.T) {
	c := counter(t)
	s := genSession(11, 300, 20)
	o, _ := compact.Extractive{Counter: c}.Observe(context.Background(), compact.Segment{Entries: s.Entries})
	before := c.Count(o.Text)
	for _, target := range []int{50, 500, before / 2, before * 2} {
		r := &compact.Condenser{Counter: c}
		d := r.Reflect(context.Background(), blocksOf(o.Text, 1, s.Entries[len(s.Entries)-1].Seq), target)
		if d.TokensAfter > target || d.TokensAfter == 0 && target > 50 {
			t.Errorf("target %d: got %d tokens (level %d)", target, d.TokensAfter, d.Level)
		}
		if d.Model != compact.ExtractiveModel || d.Fallback != "" || d.From != 1 {
			t.Errorf("target %d: %+v", target, d)
		}
	}
}

func TestFormatParse(t *testing.T) {
	at := time.Date(2026, 3, 2, 23, 59, 0, 0, time.UTC)
	obs := []compact.Observation{
		{At: at, Priority: compact.High, Fact: `User: "ship it"`, From: 1, To: 2},
		{At: at.Add(2 * time.Minute), Priority: compact.Done, Fact: "merged PR #12", From: 3, To: 9},
	}
	text := compact.Format(obs)
	want := "Date: 2026-03-02\n- 23:59 [high] User: \"ship it\" [1–2]\n\nDate: 2026-03-03\n- 00:01 [done] merged PR #12 [3–9]"
	if text != want {
		t.Fatalf("got\n%s", text)
	}
	lines := compact.Parse(text + "\nfree text line")
	if len(lines) != 3 || lines[0].Obs == nil || lines[1].Obs.From != 3 || lines[1].Date != "2026-03-03" || lines[2].Obs != nil {
		t.Fatalf("parsed %+v", lines)
	}
	if got := compact.FormatLines(lines[:2]); got != want {
		t.Fatalf("round trip:\n%s", got)
	}
}
