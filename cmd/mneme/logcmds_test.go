package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
)

func run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// export → import → export gives the same log, event for event; with
// --keep-refs into another store, the same bytes.
func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := "sqlite:" + filepath.Join(dir, "a.db")
	p := mneme.DefaultPolicy()
	p.BudgetTokens, p.ReserveOutputTokens = 8000, 500
	m, err := mneme.Open(ctx, mneme.Config{DSN: src, Policy: &p})
	if err != nil {
		t.Fatal(err)
	}
	th := m.Thread("acme", "t1")
	if _, err := th.Append(ctx, message.NewText(message.System, "sys"), message.NewText(message.User, "Goal: INV-4401 ✓ 日本語")); err != nil {
		t.Fatal(err)
	}
	// 60 steps: past the default trigger (0.90 of the budget).
	for i := 0; i < 60; i++ {
		id := fmt.Sprintf("c%d", i)
		if _, _, err := th.AppendWindow(ctx, []message.Message{
			message.NewToolCalls("", message.Part{ToolCallID: id, ToolName: "grep", Arguments: `{"q":"x"}`}),
			message.NewToolResult(id, strings.Repeat(fmt.Sprintf("line %d\n", i), 40)),
		}, mneme.WindowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()

	first, err := run(t, "", "export", "--store", src, "--tenant", "acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first, `"kind":"compacted"`) {
		t.Fatal("the session did not compact: the round trip would not cover compaction events")
	}
	if _, err := run(t, first, "import", "--store", src, "--tenant", "acme", "t2"); err != nil {
		t.Fatal(err)
	}
	second, err := run(t, "", "export", "--store", src, "--tenant", "acme", "t2")
	if err != nil {
		t.Fatal(err)
	}
	a, b := strings.Split(strings.TrimSpace(first), "\n"), strings.Split(strings.TrimSpace(second), "\n")
	if len(a) != len(b) {
		t.Fatalf("%d lines exported, %d after import", len(a), len(b))
	}
	for i := range a {
		var x, y map[string]any
		json.Unmarshal([]byte(a[i]), &x)
		json.Unmarshal([]byte(b[i]), &y)
		if x["kind"] == "message" && (x["ref"] == y["ref"] || y["ref"] == "") {
			t.Fatalf("line %d: ref %v kept without --keep-refs", i+1, x["ref"])
		}
		delete(x, "ref")
		delete(y, "ref")
		xa, _ := json.Marshal(x)
		ya, _ := json.Marshal(y)
		if !bytes.Equal(xa, ya) {
			t.Fatalf("line %d differs:\n%s\n%s", i+1, xa, ya)
		}
	}
	// With --keep-refs into another store: byte-identical.
	dst := "sqlite:" + filepath.Join(dir, "b.db")
	if _, err := run(t, first, "import", "--keep-refs", "--store", dst, "--tenant", "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	third, err := run(t, "", "export", "--store", dst, "--tenant", "acme", "t1")
	if err != nil || third != first {
		t.Fatalf("keep-refs export differs (%v)", err)
	}
	// Importing into a thread that has events is refused; a gap is refused.
	if _, err := run(t, first, "import", "--store", src, "--tenant", "acme", "t1"); err == nil {
		t.Fatal("import into a non-empty thread accepted")
	}
	gapped := strings.Join(append(a[:2:2], a[3:]...), "\n")
	if _, err := run(t, gapped, "import", "--store", src, "--tenant", "acme", "t3"); err == nil || !strings.Contains(err.Error(), "gapless") {
		t.Fatalf("a gapped log was accepted: %v", err)
	}
	out, err := run(t, "", "threads", "--store", src, "--tenant", "acme")
	if err != nil || !strings.Contains(out, "t1") || !strings.Contains(out, "t2") {
		t.Fatalf("threads: %q %v", out, err)
	}
	if _, err := run(t, "", "export", "--store", src, "--tenant", "other", "t1"); err == nil {
		t.Fatal("another tenant exported the thread")
	}
}
