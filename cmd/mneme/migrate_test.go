package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store/postgres/pgtest"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/sqlite"
)

// postgresDSN returns a DSN on a schema of the test's own (dropped at the
// end) in MNEME_TEST_POSTGRES; it skips without it, and fails under CI.
func postgresDSN(t *testing.T) string { return pgtest.DSN(t, "mneme_m") }

func runMneme(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// seed fills an SQLite store with two tenants' threads (messages, tool
// calls and results, notes, a large message) and memories.
func seed(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := func(m message.Message, tokens int) store.Event {
		return store.Event{Kind: store.KindMessage, Message: &m, Tokens: tokens}
	}
	for _, tenant := range []string{"acme", "globex"} {
		for th := range 3 {
			var evs []store.Event
			for i := range 700 { // more than one migrate batch
				evs = append(evs, ev(message.NewText(message.User, fmt.Sprintf("%s thread %d message %d about INV-%04d", tenant, th, i, i)), 10+i%7))
			}
			evs = append(evs,
				ev(message.NewToolCalls("", message.Part{ToolCallID: "c1", ToolName: "grep", Arguments: `{"q":"x"}`}), 5),
				ev(message.NewToolResult("c1", strings.Repeat("grep output line\n", 20000)+"needle-5521"), 90000),
				store.Event{Kind: store.KindCompacted, Data: json.RawMessage(`{"from_seq":1,"to_seq":600,"text":"obs"}`)},
				ev(message.NewText(message.Assistant, "done"), 1),
			)
			if _, err := s.Append(ctx, tenant, fmt.Sprintf("thread-%d", th), 0, evs); err != nil {
				t.Fatal(err)
			}
		}
		for k := range 250 {
			it := store.Memory{Namespace: []string{"facts", tenant}, Key: fmt.Sprintf("k%03d", k), Value: json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"fact %d"}`, k, k))}
			if _, err := s.PutMemory(ctx, tenant, it); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMigrateRoundTrip: SQLite → PostgreSQL → SQLite gives back every
// thread event for event (seq, kind, ref, time, tokens, message, data),
// the same thread summaries, memories and search results.
func TestMigrateRoundTrip(t *testing.T) {
	pg := postgresDSN(t)
	dir := t.TempDir()
	a, c := filepath.Join(dir, "a.db"), filepath.Join(dir, "c.db")
	seed(t, a)

	out, errOut, err := runMneme(t, "migrate", "--from", "sqlite:"+a, "--to", pg, "--all-tenants")
	if err != nil {
		t.Fatalf("migrate to postgres: %v\n%s%s", err, out, errOut)
	}
	if !strings.Contains(errOut, "100.0%") || !strings.Contains(out, "every thread and memory matches") {
		t.Errorf("no progress or check reported:\nstdout %q\nstderr %q", out, errOut)
	}
	// Again: nothing left to copy, still consistent.
	if out, errOut, err := runMneme(t, "migrate", "--from", "sqlite:"+a, "--to", pg, "--all-tenants"); err != nil {
		t.Fatalf("second migrate: %v\n%s%s", err, out, errOut)
	}
	if out, errOut, err := runMneme(t, "migrate", "--from", pg, "--to", "sqlite:"+c, "--all-tenants"); err != nil {
		t.Fatalf("migrate back to sqlite: %v\n%s%s", err, out, errOut)
	}

	ctx := context.Background()
	sa, err := sqlite.Open(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	sc, err := sqlite.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for _, tenant := range []string{"acme", "globex"} {
		for th := range 3 {
			id := fmt.Sprintf("thread-%d", th)
			ea, _ := sa.Load(ctx, tenant, id, 0, 0)
			ec, _ := sc.Load(ctx, tenant, id, 0, 0)
			if len(ea) != 704 || len(ec) != len(ea) {
				t.Fatalf("%s/%s: %d events, back %d", tenant, id, len(ea), len(ec))
			}
			for i := range ea {
				x, y := ea[i], ec[i]
				mx, _ := json.Marshal(x.Message)
				my, _ := json.Marshal(y.Message)
				if x.Seq != y.Seq || x.Kind != y.Kind || x.Ref != y.Ref || !x.At.Equal(y.At) || x.Tokens != y.Tokens ||
					!bytes.Equal(mx, my) || !bytes.Equal(x.Data, y.Data) {
					t.Fatalf("%s/%s event %d differs after the round trip", tenant, id, i)
				}
			}
			ia, _ := sa.Thread(ctx, tenant, id)
			ic, _ := sc.Thread(ctx, tenant, id)
			if ia.Events != ic.Events || ia.Messages != ic.Messages || ia.Tokens != ic.Tokens {
				t.Errorf("%s/%s: summary %+v, back %+v", tenant, id, ia, ic)
			}
		}
		for _, q := range []string{"INV-0042", "needle-5521", "grep"} {
			ha, _ := sa.Search(ctx, tenant, store.SearchQuery{Text: q, Limit: 50})
			hc, _ := sc.Search(ctx, tenant, store.SearchQuery{Text: q, Limit: 50})
			if len(ha) == 0 || len(ha) != len(hc) {
				t.Errorf("%s: search %q: %d hits, back %d", tenant, q, len(ha), len(hc))
			}
		}
		ma, _ := allMemories(ctx, sa, tenant)
		mc, _ := allMemories(ctx, sc, tenant)
		if len(ma) != 250 || len(mc) != len(ma) {
			t.Errorf("%s: %d memories, back %d", tenant, len(ma), len(mc))
		}
	}
}

// TestMigrateRefusesDivergentTarget: a target thread that is not a prefix
// of the source's stops the migration with an error.
func TestMigrateRefusesDivergentTarget(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	seed(t, a)
	ctx := context.Background()
	sb, err := sqlite.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	m := message.NewText(message.User, "something else")
	if _, err := sb.Append(ctx, "acme", "thread-1", 0, []store.Event{{Kind: store.KindMessage, Message: &m, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	sb.Close()
	_, errOut, err := runMneme(t, "migrate", "--from", "sqlite:"+a, "--to", "sqlite:"+b, "--tenant", "acme")
	if err == nil || !strings.Contains(err.Error(), "not a prefix") {
		t.Errorf("migrate onto a divergent thread: err %v, stderr %q", err, errOut)
	}
	var ee exitError
	if _, _, err := runMneme(t, "migrate", "--from", "sqlite:"+a); err == nil || errors.As(err, &ee) {
		t.Errorf("migrate without --to: %v", err)
	}
}

// droppingStore loses the last event of a thread's final Append (the one
// shorter than a full batch), silently: the count check must catch it.
type droppingStore struct{ store.Store }

func (d droppingStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	if len(evs) > 1 && len(evs) < migrateBatch {
		evs = evs[:len(evs)-1]
	}
	return d.Store.Append(ctx, tenant, thread, after, evs)
}

func TestMigrateCountCheck(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	seed(t, filepath.Join(dir, "a.db"))
	src, err := sqlite.Open(ctx, filepath.Join(dir, "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := inmem.New()
	var progress bytes.Buffer
	rep, err := migrateStores(ctx, src, droppingStore{dst}, []string{"acme"}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.mismatches) != 3 {
		t.Errorf("count check found %d mismatches, want 3 (one per thread): %q", len(rep.mismatches), rep.mismatches)
	}
	if !strings.Contains(progress.String(), "\r[") {
		t.Errorf("no progress bar drawn: %q", progress.String())
	}
	// The same copy into a faithful store passes.
	rep, err = migrateStores(ctx, src, inmem.New(), []string{"acme"}, io.Discard)
	if err != nil || len(rep.mismatches) != 0 || rep.events != 3*704 || rep.memories != 250 {
		t.Errorf("faithful copy: %+v, %v", rep, err)
	}
}
