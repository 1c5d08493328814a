package eval

import (
	"context"
	"slices"
	"testing"
)

// TestSeededRefs: the same seed gives the same refs, another seed others,
// every ref in NewRef's shape and distinct.
func TestSeededRefs(t *testing.T) {
	a, b, c := SeededRefs(1), SeededRefs(1), SeededRefs(2)
	seen := map[string]bool{}
	for range 1000 {
		ra, rb, rc := a(), b(), c()
		if ra != rb {
			t.Fatalf("seed 1 gave %q then %q", ra, rb)
		}
		if ra == rc {
			t.Fatalf("seeds 1 and 2 both gave %q", ra)
		}
		if len(ra) != 26 || ra[:2] != "m_" {
			t.Fatalf("ref %q: want m_ and 24 hex digits", ra)
		}
		if seen[ra] {
			t.Fatalf("ref %q twice", ra)
		}
		seen[ra] = true
	}
}

// TestBenchRepeats: two runs of the bench with one seed send the same
// windows token for token, masked placeholders (which carry refs)
// included; before refs were seeded, the counts moved between runs.
func TestBenchRepeats(t *testing.T) {
	cfg := BenchConfig{Turns: 120, Seed: 3, BudgetTokens: 12000, ReserveOutputTokens: 2000, Strategies: []string{StrategyMask}}
	run := func() Record {
		rep, err := Bench(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Records) != 1 || rep.Records[0].Error != "" {
			t.Fatalf("records %+v", rep.Records)
		}
		return rep.Records[0]
	}
	a, b := run(), run()
	if a.Compactions == 0 {
		t.Fatalf("no compaction in %d calls: the run does not exercise placeholders", a.Calls)
	}
	if !slices.Equal(a.WindowTokens, b.WindowTokens) {
		t.Errorf("window tokens differ between two runs with seed %d", cfg.Seed)
	}
}
