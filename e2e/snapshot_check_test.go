package e2e

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

// fetchWindows returns every thread's window as the server's JSON API
// sends it, byte for byte.
func fetchWindows(t testing.TB, base string, logs []threadLog) map[string][]byte {
	t.Helper()
	hc := &http.Client{Timeout: 60 * time.Second}
	out := make(map[string][]byte, len(logs))
	for _, l := range logs {
		resp, err := hc.Get(base + "/api/threads/" + url.PathEscape(l.id) + "/window")
		if err != nil {
			t.Fatalf("window of %s: %v", l.id, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("window of %s: status %d, %v", l.id, resp.StatusCode, err)
		}
		out[l.id] = b
	}
	return out
}

// dropSnapshots deletes every window snapshot of store d, so that the next
// process replays the logs alone, and returns how many there were.
func dropSnapshots(t testing.TB, d string) int {
	t.Helper()
	ctx := context.Background()
	var n int
	if path, ok := strings.CutPrefix(d, "sqlite:"); ok {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM snapshots`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `DELETE FROM snapshots`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	st, err := dsn.Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pg, ok := store.As[interface{ Pool() *pgxpool.Pool }](st)
	if !ok {
		t.Fatalf("store %T: cannot reach its snapshots", st)
	}
	if err := pg.Pool().QueryRow(ctx, `SELECT COUNT(*) FROM snapshots`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool().Exec(ctx, `DELETE FROM snapshots`); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkSnapshotReplay: the windows a restarted server serves (from the
// window snapshots where there are some) must be byte-identical to those
// a server that replays the logs alone serves (I7). It returns how many
// snapshots the first server could use.
func checkSnapshotReplay(t testing.TB, srv *serveProc, d string, logs []threadLog) int {
	t.Helper()
	if err := srv.restart(); err != nil {
		t.Fatal(err)
	}
	fromSnap := fetchWindows(t, srv.url(), logs)
	srv.stop()
	n := dropSnapshots(t, d)
	if err := srv.restart(); err != nil {
		t.Fatal(err)
	}
	fromLog := fetchWindows(t, srv.url(), logs)
	srv.stop()
	for id, a := range fromSnap {
		if b := fromLog[id]; string(a) != string(b) {
			t.Errorf("window of %s from its snapshot differs from the replay of its log:\n%s\n---\n%s", id, a, b)
		}
	}
	return n
}
