package eval

import (
	"bytes"
	"context"
	"encoding/json"

	"reflect"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
)

func TestGenerateIsSeeded(t *testing.T) {
	for _, p := range Profiles {
		a, err := Generate(p, 120, 7)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(p, 120, 7)
		c, _ := Generate(p, 120, 8)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different sessions", p)
		}
		if reflect.DeepEqual(a.Turns, c.Turns) {
			t.Fatalf("%s: different seeds, same session", p)
		}
		if len(a.Turns) != 120 || len(a.Facts) < 5 {
			t.Fatalf("%s: %d turns, %d facts", p, len(a.Turns), len(a.Facts))
		}
		// Every fact's value is in the session, once planted.
		var all strings.Builder
		for _, turn := range a.Turns {
			all.WriteString(WindowText(turn))
		}
		for _, f := range a.Facts {
			if !strings.Contains(all.String(), f.Value) {
				t.Fatalf("%s: fact %s not planted", p, f.Value)
			}
		}
	}
	if _, err := Generate("poetry", 10, 1); err == nil {
		t.Fatal("unknown profile accepted")
	}
}

// TestBenchGate is the issue's must-show on `mneme bench --profile coding
// --turns 300 --seed 1`: Mneme's default keeps every fact available, sends
// at most 15% of the full history's tokens, breaks no tool pair and keeps
// at least 90% of its calls prefix-stable. Baselines are run beside it to
// show the metrics discriminate.
func TestBenchGate(t *testing.T) {
	rep, err := Bench(context.Background(), BenchConfig{Profile: ProfileCoding, Turns: 300, Seed: 1,
		Strategies: []string{StrategyFull, StrategyLastN, StrategyTokenTrim, StrategySummarize, DefaultStrategy()}})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Record{}
	for _, r := range rep.Records {
		if r.Error != "" {
			t.Fatalf("%s: %s", r.Strategy, r.Error)
		}
		by[r.Strategy] = r
	}
	d := by[DefaultStrategy()]
	if !d.Default {
		t.Fatal("the default is not marked")
	}
	if d.FactAvailability < 0.99 || d.TokensSentRatio > 0.15 || d.ToolPairViolations != 0 || d.PrefixStableRatio < 0.90 || d.OverBudgetCalls != 0 {
		t.Fatalf("default misses the gate: %+v", d)
	}
	if f := by[StrategyFull]; f.TokensSentRatio != 1 || f.OverBudgetCalls == 0 || f.FactAvailability != 1 {
		t.Fatalf("full history: %+v", f)
	}
	if by[StrategyLastN].FactAvailability > 0.5 || by[StrategyLastN].ToolPairViolations == 0 {
		t.Fatalf("last-n should lose facts and orphan results: %+v", by[StrategyLastN])
	}
	if by[StrategyTokenTrim].FactAvailability > 0.5 {
		t.Fatalf("token-trim should lose early facts: %+v", by[StrategyTokenTrim])
	}
	var js bytes.Buffer
	if err := json.NewEncoder(&js).Encode(rep.Records); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"strategy", "default", "fact_availability", "tokens_sent_ratio", "peak_window_tokens", "tool_pair_violations", "superseded_errors", "prefix_stable_ratio", "window_us_p50"} {
		if !strings.Contains(js.String(), `"`+field+`":`) {
			t.Errorf("report lacks %q", field)
		}
	}
	var svg bytes.Buffer
	if err := WriteChartSVG(&svg, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Count(svg.String(), "<polyline") != len(rep.Records) {
		t.Fatal("one line per strategy expected")
	}
}

// TestProbeSupersededAndPairs checks the metrics on hand-made windows.
func TestProbeSupersededAndPairs(t *testing.T) {
	facts := []Fact{{Key: "K", Value: "K=new", Old: "K=old", Probe: "K"}, {Key: "J", Value: "J=1", Probe: "J"}}
	win := []message.Message{message.NewText(message.User, "K=old and J=1")}
	var rec Record
	rec.Facts = 2
	if err := probeFacts(context.Background(), &rec, &fullHistory{}, win, facts, 3); err != nil {
		t.Fatal(err)
	}
	if rec.FactsAvailable != 1 || rec.SupersededErrors != 1 {
		t.Fatalf("%+v", rec)
	}
	call := message.NewToolCalls("", message.Part{ToolCallID: "a", ToolName: "x", Arguments: "{}"})
	cases := []struct {
		name string
		msgs []message.Message
		want int
	}{
		{"paired", []message.Message{call, message.NewToolResult("a", "r")}, 0},
		{"orphan result", []message.Message{message.NewToolResult("a", "r")}, 1},
		{"dangling call", []message.Message{call}, 1},
		{"text between", []message.Message{call, message.NewText(message.User, "hi"), message.NewToolResult("a", "r")}, 1},
	}
	for _, tc := range cases {
		if got := len(ToolPairViolations(tc.msgs)); got != tc.want {
			t.Errorf("%s: %d violations, want %d", tc.name, got, tc.want)
		}
	}
}

// BenchmarkStrategies replays a 300-turn coding session through each
// strategy: time per window and the session's token figures.
func BenchmarkStrategies(b *testing.B) {
	for _, s := range []string{StrategyFull, StrategyTokenTrim, StrategyMask, StrategyObserve} {
		b.Run(s, func(b *testing.B) {
			var rec Record
			for i := 0; i < b.N; i++ {
				rep, err := Bench(context.Background(), BenchConfig{Turns: 300, Seed: 1, Strategies: []string{StrategyFull, s}})
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range rep.Records {
					if r.Strategy == s {
						rec = r
					}
				}
			}
			b.ReportMetric(rec.WindowUsP50, "µs/window-p50")
			b.ReportMetric(rec.TokensSentRatio, "sent/full")
			b.ReportMetric(rec.FactAvailability, "facts")
			b.ReportMetric(rec.PrefixStableRatio, "prefix-stable")
		})
	}
}

// BenchmarkRunFixture: replaying one fixture end to end (engine, checks).
func BenchmarkRunFixture(b *testing.B) {
	fs, errs := Load("../fixtures/01-first-turn-goal.json")
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := Run(context.Background(), fs[0], Options{}); !r.OK() {
			b.Fatal(r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(fs[0].Turns)), "µs/turn")
}

// BenchmarkGenerate: generating a 300-turn session.
func BenchmarkGenerate(b *testing.B) {
	var msgs int
	for i := 0; i < b.N; i++ {
		s, err := Generate(ProfileCoding, 300, uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		msgs = 0
		for _, t := range s.Turns {
			msgs += len(t)
		}
	}
	b.ReportMetric(float64(msgs), "messages")
}
