package eval

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestFixturesPass is `mneme eval fixtures/`: every fixture of the folder
// runs and passes.
func TestFixturesPass(t *testing.T) {
	fixtures, errs := Load("../fixtures")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(fixtures) < 12 {
		t.Fatalf("%d fixtures, want at least 12", len(fixtures))
	}
	for _, f := range fixtures {
		t.Run(f.Name, func(t *testing.T) {
			r := Run(context.Background(), f, Options{})
			if !r.OK() {
				var b strings.Builder
				WriteTable(&b, []Result{r})
				t.Fatal(b.String())
			}
		})
	}
}

// TestBrokenFixtures: what cannot be run is an error that says why, never
// a pass.
func TestBrokenFixtures(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"past the end", "testdata/past_end.json", "after_turn 5 is outside the fixture's turns 1–2"},
		{"unknown kind", "testdata/unknown_kind.json", `unknown check kind "window_contain"`},
		{"no checks", "testdata/no_checks.json", "no checks"},
		{"two kinds", "testdata/two_kinds.json", "two kinds in one check"},
		{"unknown cm kind", "testdata/cm_unknown_kind.json", `unknown kind "content_in_cold"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := Load(tc.file)
			if len(errs) != 1 {
				t.Fatalf("errors %v, want one", errs)
			}
			if !errors.Is(errs[0], ErrFixture) || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("error %q, want ErrFixture saying %q", errs[0], tc.want)
			}
		})
	}
	// Run refuses an invalid fixture built in Go, too.
	f := &Fixture{Name: "x", Turns: []Turn{{Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)}}},
		Checks: []Check{{AfterTurn: 2, Kind: KindWindowContains, Arg: json.RawMessage(`"hi"`)}}}
	if r := Run(context.Background(), f, Options{}); r.OK() || !strings.Contains(r.Error, "outside the fixture's turns") {
		t.Fatalf("Run of a past-the-end check: %+v", r)
	}
}

// TestFixturesCanFail mutates fixtures' policies and checks: the checks
// notice when the feature they guard is switched off or the claim is false.
func TestFixturesCanFail(t *testing.T) {
	cases := []struct {
		file   string
		mutate func(f *Fixture)
		failed string // a check that must now fail
	}{
		// Unpinning the head (even with a later user turn, so the goal is no
		// longer the current request) no longer loses the goal's ticket id:
		// the salient memory keeps the goal's line (issue 16). What the
		// fixture still guards is the old bodies leaving under compaction.
		{"01-first-turn-goal.json", policy(`{"budget_tokens":100000}`), "window_excludes after turn 25"},
		{"02-evict-huge-result.json", policy(`{"budget_tokens":100000,"evict_over_tokens":20000}`), "window_excludes after turn 2"},
		{"03-mask-old-results.json", policy(`{"strategy":"archive"}`), "window_contains after turn 9"},
		{"05-observe-extractive.json", policy(`{"budget_tokens":100000}`), "observation_contains after turn 14"},
		{"08-prefix-stable.json", policy(`{"trigger":0.3,"target":0.1}`), "prefix_stable after turn"},
		{"09-budget-holds.json", check(`{"after_turn":16,"window_tokens_at_most":1000}`), "window_tokens_at_most after turn 16"},
		{"14-recall-early-grep.json", check(`{"after_turn":21,"recallable":{"query":"FLAG_NEW_CHECKOUT_V3","expect":"owner: team-billing"}}`), "recallable after turn 21"},
		{"07-repair-dangling-orphan.json", check(`{"after_turn":4,"window_contains":"XYZZY-ORPHAN"}`), "window_contains after turn 4"},
		{"12-cm-head-tail.json", policy(`{"trigger":"100 messages","target":"90 messages"}`), "window_excludes after turn 11"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile("../fixtures/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(data, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if r := Run(context.Background(), f, Options{}); !r.OK() {
				t.Fatalf("unmutated fixture fails: %+v", r)
			}
			tc.mutate(f)
			r := Run(context.Background(), f, Options{})
			if r.Error != "" {
				t.Fatal(r.Error)
			}
			for _, c := range r.Checks {
				if !c.Pass && strings.Contains(c.Check, tc.failed) {
					return
				}
			}
			t.Fatalf("after the mutation no %q check failed: %+v", tc.failed, r.Checks)
		})
	}
}

func policy(js string) func(*Fixture) {
	return func(f *Fixture) {
		var m map[string]any
		_ = json.Unmarshal(f.Policy, &m)
		if m == nil {
			m = map[string]any{}
		}
		var over map[string]any
		_ = json.Unmarshal([]byte(js), &over)
		for k, v := range over {
			m[k] = v
		}
		f.Policy, _ = json.Marshal(m)
	}
}

func check(js string) func(*Fixture) {
	return func(f *Fixture) {
		var c Check
		if err := json.Unmarshal([]byte(js), &c); err != nil {
			panic(err)
		}
		f.Checks = append(f.Checks, c)
	}
}

// TestContextManagerImport: the Python library's format maps to checks of
// the native kinds, with tool calls given to its bare tool messages.
func TestContextManagerImport(t *testing.T) {
	data, err := os.ReadFile("../fixtures/13-cm-last-n-tools.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(data, "cm.json")
	if err != nil {
		t.Fatal(err)
	}
	if f.Source != "context-manager" {
		t.Fatalf("source %q", f.Source)
	}
	var kinds []string
	for _, c := range f.Checks {
		kinds = append(kinds, c.Kind)
	}
	want := []string{KindWindowContains, KindWindowExcludes, KindRecallable, KindArchivedAtLeast}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	msgs, err := f.Turns[1].decode()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || len(msgs[0].ToolCallIDs()) != 1 || msgs[0].ToolCallIDs()[0] != "t1" || !msgs[1].IsToolResult() {
		t.Fatalf("turn 2 not paired: %+v", msgs)
	}
	var pol map[string]any
	_ = json.Unmarshal(f.Policy, &pol)
	if pol["trigger"] != "7 messages" || pol["strategy"] != "mask" || pol["pin_head"] != false {
		t.Fatalf("policy %v", pol)
	}
}

// TestContextManagerRealFixtures: the peer library's own six fixtures, read
// unchanged from ../shared/data, load, run and pass every check: their tool
// messages carry a tool name and no call id, and each becomes a paired call
// and result.
func TestContextManagerRealFixtures(t *testing.T) {
	fs, errs := Load("../../shared/data/context-manager-fixtures")
	for _, err := range errs {
		t.Error(err)
	}
	if len(fs) != 6 {
		t.Fatalf("%d fixtures loaded, want 6", len(fs))
	}
	passed := 0
	for _, f := range fs {
		for i, turn := range f.Turns {
			msgs, err := turn.decode()
			if err != nil {
				t.Fatalf("%s turn %d: %v", f.Name, i+1, err)
			}
			calls := map[string]bool{}
			for _, m := range msgs {
				for _, id := range m.ToolCallIDs() {
					calls[id] = true
				}
				for _, id := range m.ResultIDs() {
					if !calls[id] {
						t.Errorf("%s turn %d: result %q has no call before it", f.Name, i+1, id)
					}
				}
			}
		}
		r := Run(context.Background(), f, Options{})
		if r.Error != "" {
			t.Errorf("%s: %s", f.Name, r.Error)
		}
		if r.OK() {
			passed++
		}
		for _, c := range r.Checks {
			if !c.Pass {
				t.Errorf("%s: %s: %s", f.Name, c.Check, c.Detail)
			}
		}
		t.Logf("%s: %d/%d checks", f.Name, r.Passed, r.Total)
	}
	if passed != 6 {
		t.Errorf("%d of 6 fixtures pass every check", passed)
	}
}
