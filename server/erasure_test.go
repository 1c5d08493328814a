package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/store"
)

// payloadString returns a unique string to write and then look for.
func payloadString(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// residue reports where the backend's bytes still hold s: the SQLite file
// and its WAL, or any row of any table of the PostgreSQL schema (each row
// cast to text, every column included: text, JSON, tsvector).
func (r *rig) residue(t *testing.T, s string) []string {
	t.Helper()
	var where []string
	switch r.backend {
	case "sqlite":
		for _, f := range []string{r.sqlite, r.sqlite + "-wal", r.sqlite + "-journal"} {
			b, err := os.ReadFile(f)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(s)) {
				where = append(where, f)
			}
		}
	case "postgres":
		ctx := context.Background()
		c, err := pgx.Connect(ctx, r.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`)
		if err != nil {
			t.Fatal(err)
		}
		var tables []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, name)
		}
		rows.Close()
		if len(tables) < 4 {
			t.Fatalf("only tables %v in the schema", tables)
		}
		for _, tb := range tables {
			var n int
			q := fmt.Sprintf(`SELECT count(*) FROM %s AS t WHERE t::text LIKE '%%' || $1 || '%%'`, pgx.Identifier{tb}.Sanitize())
			if err := c.QueryRow(ctx, q, s).Scan(&n); err != nil {
				t.Fatalf("%s: %v", tb, err)
			}
			if n > 0 {
				where = append(where, fmt.Sprintf("table %s (%d rows)", tb, n))
			}
		}
	default:
		t.Fatalf("no byte inspection for %s", r.backend)
	}
	return where
}

// residueAfter waits up to d for s to leave the backend's bytes and
// returns where it still is.
func (r *rig) residueAfter(t *testing.T, s string, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		where := r.residue(t, s)
		if len(where) == 0 || time.Now().After(deadline) {
			return where
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeThread runs a session on thread whose user messages, tool results
// and (through compaction) observations carry payload, then flushes the
// embedding queue so that vectors exist too.
func writeThread(t *testing.T, r *rig, key, thread, payload string) []map[string]any {
	t.Helper()
	type msg = map[string]any
	history := []msg{{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": payload + " is the ticket to fix."}}
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("call_%d", i)
		if i > 0 {
			history = append(history, msg{"role": "user", "content": fmt.Sprintf("%s step %d: go on.", payload, i)})
		}
		body := strings.Repeat(fmt.Sprintf("line of file %d mentioning %s and more words here\n", i, payload), 30)
		history = append(history,
			msg{"role": "assistant", "content": nil, "tool_calls": []msg{{"id": id, "type": "function", "function": msg{"name": "read_file", "arguments": `{"path":"` + payload + `.go"}`}}}},
			msg{"role": "tool", "tool_call_id": id, "content": body})
		b, _ := json.Marshal(msg{"model": "gpt-4o-mini", "messages": history})
		status, _, rb := r.do(t, "POST", "/v1/chat/completions", key, string(b), proxy.HeaderThread, thread)
		if status != 200 {
			t.Fatalf("step %d: %d %s", i, status, rb)
		}
		history = append(history, msg{"role": "assistant", "content": replyText(rb)})
	}
	if err := r.m.FlushIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	return history
}

// searchFinds reports whether the tenant's archive search (hybrid: BM25
// and vectors) finds q.
func (r *rig) searchFinds(t *testing.T, tenant, q string) bool {
	t.Helper()
	hits, err := r.m.Recall().Search(context.Background(), tenant, store.SearchQuery{Text: q, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return len(hits) > 0
}

// TestErasure: DELETE of a thread and of a memory namespace removes the
// payload from the log, the archive index, the vectors and the
// observations, on every backend: searches find nothing, and the SQLite
// file (with its WAL) or every PostgreSQL table no longer holds the bytes.
// The deleted thread's id can be used again from scratch.
func TestErasure(t *testing.T) {
	for _, backend := range backendsUnderTest {
		t.Run(backend, func(t *testing.T) {
			r := startRig(t, rigOpts{backend: backend, budget: 8000, embedder: true, keys: map[string]string{"key-a": "tenant-a"}})
			payload, memPayload, keep := payloadString("erasethread"), payloadString("erasememory"), payloadString("keepme")
			history := writeThread(t, r, "key-a", "doomed", payload)
			writeThread(t, r, "key-a", "kept", keep)
			if status, _, b := r.do(t, "PUT", "/api/memory/item?ns=erase&ns=me&key=k", "key-a", `{"value":{"note":"`+memPayload+`"}}`); status != 200 {
				t.Fatalf("memory: %d %s", status, b)
			}
			_, _, ev := r.do(t, "GET", "/api/threads/doomed/events", "key-a", "")
			if !strings.Contains(string(ev), payload) || !strings.Contains(string(ev), `"compactions":[{`) {
				t.Fatalf("the doomed thread has no observation quoting the payload: %.300s", ev)
			}
			if !r.searchFinds(t, "tenant-a", payload) || len(r.residue(t, payload)) == 0 || len(r.residue(t, memPayload)) == 0 {
				t.Fatal("the payload is not found before the delete: the test would prove nothing")
			}
			var vectors int
			if vs, ok := store.As[store.Vectors](r.st); ok {
				_ = vs
				vectors = countVectors(t, r, "doomed")
				if vectors == 0 {
					t.Fatal("no vectors for the doomed thread before the delete")
				}
			}
			_, _, sr := r.do(t, "GET", "/api/search?q="+payload, "key-a", "")
			var res struct {
				Hits []store.Hit `json:"hits"`
			}
			if json.Unmarshal(sr, &res) != nil || len(res.Hits) == 0 {
				t.Fatalf("search: %s", sr)
			}
			ref := res.Hits[0].Ref

			if status, _, b := r.do(t, "DELETE", "/api/threads/doomed", "key-a", ""); status != http.StatusNoContent {
				t.Fatalf("DELETE thread: %d %s", status, b)
			}
			if status, _, b := r.do(t, "DELETE", "/api/memory?ns=erase", "key-a", ""); status != 200 || !strings.Contains(string(b), `"deleted":1`) {
				t.Fatalf("DELETE namespace: %d %s", status, b)
			}

			if r.searchFinds(t, "tenant-a", payload) {
				t.Error("the archive still finds the deleted thread")
			}
			for _, p := range []string{"/api/search?q=" + payload, "/api/memory?q=" + memPayload} {
				if _, _, b := r.do(t, "GET", p, "key-a", ""); strings.Contains(string(b), "erase") {
					t.Errorf("GET %s after the delete: %s", p, b)
				}
			}
			for _, p := range []string{"/api/read/" + ref, "/api/threads/doomed/export", "/api/threads/doomed/events"} {
				if status, _, _ := r.do(t, "GET", p, "key-a", ""); status != http.StatusNotFound {
					t.Errorf("GET %s after the delete: %d", p, status)
				}
			}
			if n := countVectors(t, r, "doomed"); n != 0 {
				t.Errorf("%d vectors of the deleted thread remain", n)
			}
			// The purge that follows a delete runs in the background.
			for _, s := range []string{payload, memPayload} {
				if where := r.residueAfter(t, s, 15*time.Second); len(where) > 0 {
					t.Errorf("%s is still in %v", s, where)
				}
			}
			if where := r.residue(t, keep); len(where) == 0 || !r.searchFinds(t, "tenant-a", keep) {
				t.Error("the delete took the other thread with it")
			}

			// The client resends the deleted history: a new thread, whole.
			b, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": history})
			if status, _, rb := r.do(t, "POST", "/v1/chat/completions", "key-a", string(b), proxy.HeaderThread, "doomed"); status != 200 {
				t.Fatalf("resend after the delete: %d %s", status, rb)
			}
			if n := len(r.messagesOf(t, "tenant-a", "doomed")); n != len(history)+1 {
				t.Errorf("after the delete the resent history logged %d messages, want %d", n, len(history)+1)
			}
		})
	}
}

// countVectors counts the vectors of the tenant-a thread through a
// nearest-neighbour search of every vector the thread could have.
func countVectors(t *testing.T, r *rig, thread string) int {
	t.Helper()
	vs, ok := store.As[store.Vectors](r.st)
	if !ok {
		t.Fatalf("%s keeps no vectors", r.backend)
	}
	emb := r.m.Recall().Embedder
	if emb == nil {
		t.Fatal("no embedder")
	}
	q, err := emb.Embed(context.Background(), []string{"line of file mentioning"})
	if err != nil {
		t.Fatal(err)
	}
	hits, err := vs.SearchVectors(context.Background(), "tenant-a", store.VectorQuery{Model: emb.Model(), V: q[0], Thread: thread, Limit: store.MaxVectorLimit})
	if err != nil {
		t.Fatal(err)
	}
	return len(hits)
}

// TestRetention: the sweeper deletes the threads idle for longer than the
// retention period, whole (searches and bytes, as a DELETE would), and
// keeps the others; RunRetention sweeps at start and on its ticker and
// returns when its context ends.
func TestRetention(t *testing.T) {
	for _, backend := range backendsUnderTest {
		t.Run(backend, func(t *testing.T) {
			r := startRig(t, rigOpts{backend: backend, budget: 8000, embedder: true, keys: map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"}})
			old, oldB, fresh := payloadString("oldthread"), payloadString("oldthreadb"), payloadString("freshthread")
			writeThread(t, r, "key-a", "old", old)
			writeThread(t, r, "key-b", "old-b", oldB)
			// The old threads' last activity (background observations
			// included, which may come later) is before idle or soon after.
			time.Sleep(300 * time.Millisecond)
			idle := time.Now()
			writeThread(t, r, "key-a", "fresh", fresh)
			// Sweeping threads idle for maxAge: the old threads become
			// that old once the sweeper runs (their age grows, maxAge does
			// not). The fresh one is kept active while the sweeper runs, a
			// user message every 50 ms, far less than maxAge: the time its
			// ten requests took, however slow the machine is, and at least
			// 250 ms, however fast (they once took 47).
			maxAge := max(time.Since(idle), 250*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.m.RunRetention(ctx, maxAge, 50*time.Millisecond) }()
			alive := make(chan error, 1)
			go func() {
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						alive <- nil
						return
					case <-tick.C:
						if _, err := r.m.Thread("tenant-a", "fresh").Append(ctx, message.NewText(message.User, "still here")); err != nil && ctx.Err() == nil {
							alive <- err
							return
						}
					}
				}
			}()
			deadline := time.Now().Add(30 * time.Second)
			for r.searchFinds(t, "tenant-a", old) || r.searchFinds(t, "tenant-b", oldB) {
				if time.Now().After(deadline) {
					t.Fatal("the sweeper did not delete the idle threads")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// The sweep purges the files once its deletions are done.
			for _, s := range []string{old, oldB} {
				if where := r.residueAfter(t, s, 15*time.Second); len(where) > 0 {
					t.Errorf("%s is still in %v", s, where)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("RunRetention: %v", err)
			}
			if err := <-alive; err != nil {
				t.Fatalf("keeping the fresh thread active: %v", err)
			}
			if !r.searchFinds(t, "tenant-a", fresh) {
				t.Error("the sweeper deleted a thread active within the period")
			}
			if status, _, _ := r.do(t, "GET", "/api/threads/old", "key-a", ""); status != http.StatusNotFound {
				t.Errorf("the swept thread: %d", status)
			}
			// A swept thread id can start over through the engine.
			if status, _, b := r.do(t, "POST", "/v1/chat/completions", "key-a", chatBody("user", "again"), proxy.HeaderThread, "old"); status != 200 {
				t.Errorf("reuse of a swept id: %d %s", status, b)
			}
		})
	}
}
