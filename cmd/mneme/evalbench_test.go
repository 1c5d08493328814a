package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestEvalCommand(t *testing.T) {
	out, err := runCLI(t, "eval", "../../fixtures")
	if err != nil {
		t.Fatalf("eval fixtures/: %v\n%s", err, out)
	}
	if !strings.Contains(out, "0 failed") || !strings.Contains(out, "first-turn-goal") {
		t.Fatalf("table:\n%s", out)
	}
	broken := filepath.Join(t.TempDir(), "broken.json")
	os.WriteFile(broken, []byte(`{"name":"b","turns":[{"messages":[{"role":"user","content":"hi"}]}],"checks":[{"after_turn":3,"window_contains":"hi"}]}`), 0o644)
	out, err = runCLI(t, "eval", broken)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("broken fixture: err %v", err)
	}
	if !strings.Contains(out, "after_turn 3 is outside the fixture's turns 1–1") {
		t.Fatalf("no clear message:\n%s", out)
	}
	out, err = runCLI(t, "eval", "--json", "../../fixtures/11-model-turns.json")
	if err != nil {
		t.Fatal(err)
	}
	var res []map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 || res[0]["passed"] != res[0]["total"] {
		t.Fatalf("json: %v %s", err, out)
	}
}

func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "r.json"), filepath.Join(dir, "c.svg")
	out, err := runCLI(t, "bench", "--quiet", "--turns", "60", "--budget", "8000", "--reserve-output", "1000",
		"--strategies", "full-history,last-n,mneme-mask,mneme-observe-llm", "--json", js, "--chart", svg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "mneme-mask *") || !strings.Contains(out, "8000-token context window") {
		t.Fatalf("table:\n%s", out)
	}
	var recs []map[string]any
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &recs); err != nil || len(recs) != 4 {
		t.Fatalf("report: %v %s", err, b)
	}
	for _, r := range recs {
		if r["strategy"] == "mneme-observe-llm" && r["compactions"].(float64) < 1 {
			t.Fatalf("observe-llm never compacted: %v", r)
		}
	}
	c, _ := os.ReadFile(svg)
	if !bytes.HasPrefix(c, []byte("<svg")) || bytes.Count(c, []byte("<polyline")) != 4 {
		t.Fatalf("chart: %.200s", c)
	}
}
