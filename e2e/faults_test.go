package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fault suite: real `mneme serve` processes on SQLite files under
// faults of the machine (the file removed, the disk full, the file system
// read-only), a hung upstream with 100 clients, and 3,000 idle connections.
// Each case logs what every client got (statuses, counted) and what the
// server's log holds about it; the assertions are the issue's: no 5xx body
// with internal text, nothing acknowledged that is not durable, limits that
// hold.

// faultTally counts the statuses clients got, with one body each.
type faultTally struct {
	mu     sync.Mutex
	counts map[int]int
	bodies map[int]string // one body per status, for the report
}

func newFaultTally() *faultTally { return &faultTally{counts: map[int]int{}, bodies: map[int]string{}} }

func (t *faultTally) add(status int, body string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[status]++
	if _, ok := t.bodies[status]; !ok {
		t.bodies[status] = body
	}
}

func (t *faultTally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keys []int
	for k := range t.counts {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d×%d ", t.counts[k], k)
	}
	return strings.TrimSpace(b.String())
}

func chat(base, thread, text string) (int, http.Header, string, error) {
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}]}`, text)
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Mneme-Thread", thread)
	req.Header.Set("X-Mneme-Mode", "append")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), nil
}

// logLines returns the lines of the process's current log that contain s.
func (p *serveProc) logLines(s string) []string {
	files, _ := filepath.Glob(filepath.Join(p.logs, "*.log"))
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, s) {
				out = append(out, line)
			}
		}
	}
	return out
}

// check5xx: a 5xx body names its request id and carries no internal text;
// the log holds a line with that id (checked at the end of the test: the
// process's stderr reaches its file asynchronously).
func check5xx(t *testing.T, p *serveProc, status int, hdr http.Header, body string, internals ...string) {
	t.Helper()
	if status < 500 {
		return
	}
	id := hdr.Get("X-Request-Id")
	if id == "" || !strings.Contains(body, id) {
		t.Errorf("%d body without its request id %q: %s", status, id, body)
	}
	for _, s := range append(internals, "sqlite", "127.0.0.1", "http://") {
		if strings.Contains(body, s) {
			t.Errorf("%d body carries %q: %s", status, s, body)
		}
	}
	p.mu.Lock()
	if p.pending == nil {
		t.Cleanup(func() { p.checkLogged(t) })
	}
	p.pending = append(p.pending, id)
	p.mu.Unlock()
}

// checkLogged: every request id check5xx saw is in the log, within a few
// seconds (the pipe from the process's stderr to its log file).
func (p *serveProc) checkLogged(t *testing.T) {
	p.mu.Lock()
	ids := p.pending
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range ids {
		for len(p.logLines(id)) == 0 {
			if time.Now().After(deadline) {
				t.Errorf("the log holds nothing for request %s", id)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// threadMessages reads a thread's message count through the API.
func threadMessages(t *testing.T, base, thread string) int {
	t.Helper()
	resp, err := http.Get(base + "/api/threads/" + thread)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	var v struct {
		Thread struct {
			Messages int `json:"messages"`
		} `json:"thread"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET /api/threads/%s: %d %s", thread, resp.StatusCode, b)
	}
	return v.Thread.Messages
}

// TestFaultFileRemoved: the SQLite file removed under a running server.
// Before: 200s. After: /healthz 503, every write 503 with Retry-After and a
// request id, nothing acknowledged; after a restart the store holds no
// message acknowledged after the removal (it holds nothing: the file was
// removed, and the server says so instead of acknowledging into it).
func TestFaultFileRemoved(t *testing.T) {
	m := startModel(t)
	d := t.TempDir()
	db := filepath.Join(d, "m.db")
	p := startServe(t, "removed", "--store", "sqlite:"+db, "--openai-upstream", m.upstream(), "--log-format", "json")
	before := newFaultTally()
	for i := 0; i < 10; i++ {
		st, _, body, err := chat(p.url(), "rm", fmt.Sprintf("before %d", i))
		if err != nil {
			t.Fatal(err)
		}
		before.add(st, body)
	}
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		os.Remove(f)
	}
	resp, err := http.Get(p.url() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	after := newFaultTally()
	acked := 0
	for i := 0; i < 20; i++ {
		st, hdr, body, err := chat(p.url(), "rm", fmt.Sprintf("after %d", i))
		if err != nil {
			t.Fatal(err)
		}
		after.add(st, body)
		if st == 200 {
			acked++
		}
		if st == http.StatusServiceUnavailable && hdr.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After")
		}
		check5xx(t, p, st, hdr, body, db)
	}
	t.Logf("removed file: before %s; /healthz %d; after %s; 503 body %s", before, resp.StatusCode, after, after.bodies[503])
	t.Logf("log: %d lines name the removal, e.g. %s", len(p.logLines("was removed while open")), first(p.logLines("was removed while open")))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz after the removal: %d, want 503", resp.StatusCode)
	}
	if acked > 0 {
		t.Errorf("%d requests acknowledged after the file was removed", acked)
	}
	p.kill()
	if err := p.restart(); err != nil {
		t.Fatal(err)
	}
	if n := threadMessages(t, p.url(), "rm"); n != 0 {
		t.Errorf("after the restart the thread holds %d messages of a removed file", n)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return s[0]
}

// smallFS mounts a tmpfs of size bytes at a new directory, or returns ""
// when the process may not mount (not root, or no CAP_SYS_ADMIN in CI).
func smallFS(t *testing.T, size string) string {
	d := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", d).CombinedOutput(); err != nil {
		t.Logf("mount tmpfs: %v %s", err, out)
		return ""
	}
	t.Cleanup(func() { exec.Command("umount", "-l", d).Run() })
	return d
}

// TestFaultDiskFull: the store's file system fills up (a 1 MiB tmpfs,
// or, where mounting is not allowed, the server run under a file-size
// limit, ulimit -f, which fails writes past it with EFBIG the same way).
// Requests past the fill answer 503 with Retry-After and no internal text;
// what was acknowledged is there after a restart.
func TestFaultDiskFull(t *testing.T) {
	m := startModel(t)
	dir := smallFS(t, "1m")
	how := "tmpfs size=1m"
	var p *serveProc
	if dir == "" {
		dir, how = t.TempDir(), "ulimit -f 1024 (no mount permission)"
		p = startServeUnder(t, "full", "ulimit -f 1024;", "--store", "sqlite:"+filepath.Join(dir, "m.db"), "--openai-upstream", m.upstream(), "--log-format", "json")
	} else {
		p = startServe(t, "full", "--store", "sqlite:"+filepath.Join(dir, "m.db"), "--openai-upstream", m.upstream(), "--log-format", "json")
	}
	all := newFaultTally()
	acked := map[string][]int{}                 // thread → the i of each acknowledged request
	big := strings.Repeat("disk filler ", 2000) // ≈24 KB a message
	for i := 0; i < 120; i++ {
		th := fmt.Sprintf("full-%d", i%4)
		st, hdr, body, err := chat(p.url(), th, fmt.Sprintf("%d %s", i, big))
		if err != nil {
			t.Fatal(err)
		}
		all.add(st, body)
		if st == 200 {
			acked[th] = append(acked[th], i)
		}
		if st >= 500 && st != http.StatusServiceUnavailable {
			t.Errorf("a full disk answered %d: %s", st, body)
		}
		if st == http.StatusServiceUnavailable && hdr.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After")
		}
		check5xx(t, p, st, hdr, body, "disk is full", "(13)")
	}
	t.Logf("disk full (%s): %s; 503 body %s", how, all, all.bodies[503])
	t.Logf("log: %d lines name the full disk, e.g. %s", len(p.logLines("full")), first(p.logLines("disk is full")))
	if all.counts[503] == 0 {
		t.Errorf("the disk never filled: %s", all)
	}
	if all.counts[200] == 0 {
		t.Fatalf("nothing was acknowledged before the disk filled: %s", all)
	}
	// Every acknowledged request is in the log after a restart (SIGKILL):
	// on the full disk if the server comes back there, else once the disk
	// has room again (the tmpfs grown), where it must come back.
	p.kill()
	if err := p.restart(); err != nil {
		t.Logf("restart on the full disk: %v", err)
		if how != "tmpfs size=1m" {
			t.Fatalf("restart under the file-size limit: %v", err)
		}
		if out, err := exec.Command("mount", "-o", "remount,size=16m", dir).CombinedOutput(); err != nil {
			t.Fatalf("grow the tmpfs: %v %s", err, out)
		}
		if err := p.restart(); err != nil {
			t.Fatalf("restart with room on the disk: %v", err)
		}
	}
	lost := 0
	for th, is := range acked {
		users := map[string]int{}
		for _, text := range userTexts(t, exportThread(t, p.url(), th)) {
			users[text]++
		}
		for _, i := range is {
			if n := users[fmt.Sprintf("%d %s", i, big)]; n != 1 {
				t.Errorf("thread %s: acknowledged request %d is in the log %d times after the restart", th, i, n)
				lost++
			}
		}
	}
	t.Logf("after a SIGKILL and a restart: %d acknowledged requests checked by content in %d threads, %d lost or duplicated", all.counts[200], len(acked), lost)
}

// userTexts returns the text of each user message in an export, in order.
func userTexts(t *testing.T, export string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(export), "\n") {
		var l struct {
			Kind    string          `json:"kind"`
			Message json.RawMessage `json:"message"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if len(l.Message) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l.Message, &m); err != nil {
			t.Fatalf("export message %s: %v", l.Message, err)
		}
		if m["role"] == "user" {
			out = append(out, flatText(m["content"]))
		}
	}
	return out
}

// exportThread returns a thread's whole log as GET /api/threads/{id}/export
// gives it (JSONL).
func exportThread(t *testing.T, base, thread string) string {
	t.Helper()
	resp, err := http.Get(base + "/api/threads/" + thread + "/export")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("export %s: %d %s", thread, resp.StatusCode, b)
	}
	return string(b)
}

// startServeUnder starts `mneme serve` through sh with a prefix command
// (a ulimit).
func startServeUnder(t *testing.T, name, prefix string, args ...string) *serveProc {
	sh := filepath.Join(t.TempDir(), "mneme")
	script := "#!/bin/sh\n" + prefix + " exec " + mnemeBin(t) + ` "$@"` + "\n"
	if err := os.WriteFile(sh, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	old := binPath
	binPath = sh
	defer func() { binPath = old }()
	return startServe(t, name, args...)
}

// TestFaultReadOnly: the store's file system is read-only (a tmpfs
// remounted ro; as root, a file mode would not stop the writes, and a
// file system with a database open for writing cannot be remounted). The
// server started on it either refuses to start with a clear error, or
// answers writes 503 and never acknowledges one.
func TestFaultReadOnly(t *testing.T) {
	dir := smallFS(t, "8m")
	if dir == "" {
		t.Skip("mount not permitted here: the read-only case needs a file system to remount (TestFaultFileRemoved and TestFaultDiskFull run)")
	}
	m := startModel(t)
	args := []string{"--store", "sqlite:" + filepath.Join(dir, "m.db"), "--openai-upstream", m.upstream(), "--log-format", "json"}
	p := startServe(t, "ro", args...)
	if st, _, body, err := chat(p.url(), "ro", "before"); err != nil || st != 200 {
		t.Fatalf("before: %d %v %s", st, err, body)
	}
	p.stop()
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v %s", err, out)
	}
	defer exec.Command("mount", "-o", "remount,rw", dir).Run()
	if err := p.restart(); err != nil {
		t.Logf("read-only fs: the server refuses to start: %v", err)
		if !strings.Contains(err.Error(), "readonly") && !strings.Contains(err.Error(), "read-only") && !strings.Contains(err.Error(), "read only") {
			t.Errorf("the refusal does not say the store is read-only: %v", err)
		}
		return
	}
	writes := newFaultTally()
	for i := 0; i < 10; i++ {
		st, hdr, body, err := chat(p.url(), "ro", fmt.Sprintf("after %d", i))
		if err != nil {
			t.Fatal(err)
		}
		writes.add(st, body)
		check5xx(t, p, st, hdr, body)
	}
	t.Logf("read-only fs: writes %s (503 body %s)", writes, writes.bodies[503])
	t.Logf("log: %s", first(p.logLines("readonly")))
	if writes.counts[200] > 0 {
		t.Errorf("%d writes acknowledged on a read-only file system", writes.counts[200])
	}
	if writes.counts[503] != 10 {
		t.Errorf("writes on a read-only file system: %s, want 10×503", writes)
	}
}

// TestFaultReadOnlyFile: the database file itself is read-only (mode
// 0444) on a writable file system. SQLite then opens it read-only without
// a word, so the server starts; it must say so: /healthz 503, every write
// 503 with Retry-After and a request id, none acknowledged, and after the
// file is writable again and the server restarted the thread holds what it
// held before, nothing more. Root writes through a file's mode, so as root
// the server runs as nobody (setpriv).
func TestFaultReadOnlyFile(t *testing.T) {
	dir, err := os.MkdirTemp("", "mneme-rofile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	db := filepath.Join(dir, "m.db")
	var p *serveProc
	m := startModel(t)
	args := []string{"--store", "sqlite:" + db, "--openai-upstream", m.upstream(), "--log-format", "json"}
	how := "mode 0444"
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("running as root without setpriv: a file's mode does not stop root's writes, and there is no way here to run the server as another user")
		}
		// nobody must reach the binary and the directory.
		bin := filepath.Join(dir, "mneme")
		b, err := os.ReadFile(mnemeBin(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		how = "mode 0444, the server run as nobody (setpriv)"
		p = startServeWrapped(t, "rofile", setpriv+" --reuid=65534 --regid=65534 --clear-groups "+bin, args...)
	} else {
		p = startServe(t, "rofile", args...)
	}
	if st, _, body, err := chat(p.url(), "rofile", "before"); err != nil || st != 200 {
		t.Fatalf("before: %d %v %s", st, err, body)
	}
	held := threadMessages(t, p.url(), "rofile")
	p.stop()
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Chmod(f, 0o444); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	p.anyHealth = true // started on a read-only file, it may say so on /healthz
	err = p.restart()
	p.anyHealth = false
	if err != nil {
		t.Logf("read-only file (%s): the server refuses to start: %v", how, err)
		if !strings.Contains(err.Error(), "read-only") && !strings.Contains(err.Error(), "readonly") && !strings.Contains(err.Error(), "not writable") {
			t.Errorf("the refusal does not say the file is read-only: %v", err)
		}
		return
	}
	resp, err := http.Get(p.url() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	writes := newFaultTally()
	for i := 0; i < 10; i++ {
		st, hdr, body, err := chat(p.url(), "rofile", fmt.Sprintf("after %d", i))
		if err != nil {
			t.Fatal(err)
		}
		writes.add(st, body)
		if st == http.StatusServiceUnavailable && hdr.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After")
		}
		check5xx(t, p, st, hdr, body, db)
	}
	t.Logf("read-only file (%s): /healthz %d %s; writes %s; 503 body %s", how, resp.StatusCode, strings.TrimSpace(string(hb)), writes, writes.bodies[503])
	t.Logf("log: %d lines name the read-only database, e.g. %s", len(p.logLines("readonly"))+len(p.logLines("read-only")), first(append(p.logLines("read-only"), p.logLines("readonly")...)))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz on a read-only database file: %d %s, want 503", resp.StatusCode, hb)
	}
	if writes.counts[200] > 0 {
		t.Errorf("%d writes acknowledged on a read-only database file", writes.counts[200])
	}
	if writes.counts[503] != 10 {
		t.Errorf("writes on a read-only database file: %s, want 10×503", writes)
	}
	p.stop()
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Chmod(f, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if err := p.restart(); err != nil {
		t.Fatal(err)
	}
	if n := threadMessages(t, p.url(), "rofile"); n != held {
		t.Errorf("after the file was writable again the thread holds %d messages, %d before it was read-only", n, held)
	}
}

// startServeWrapped starts `mneme serve` through sh as `exec WRAPPED
// serve ...`: wrapped is the command line that runs the binary (setpriv
// ... BIN).
func startServeWrapped(t *testing.T, name, wrapped string, args ...string) *serveProc {
	sh := filepath.Join(t.TempDir(), "mneme")
	if err := os.WriteFile(sh, []byte("#!/bin/sh\nexec "+wrapped+` "$@"`+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mnemeBin(t) // built (or MNEME_BIN resolved) before binPath is swapped
	old := binPath
	binPath = sh
	defer func() { binPath = old }()
	return startServe(t, name, args...)
}

// TestFaultHungUpstream100: 100 clients against an upstream that never
// answers, tenant limit 64, upstream timeout 2 s: 64 get 504 (with a
// request id, no URL), 36 get 429 at once, and the limit held whatever the
// Accept header said.
func TestFaultHungUpstream100(t *testing.T) {
	reached := make(chan struct{}, 1000)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	p := startServe(t, "hung", "--store", "sqlite:"+filepath.Join(t.TempDir(), "m.db"), "--openai-upstream", up.URL, "--upstream-timeout", "2s", "--log-format", "json")
	all, posts, streams := newFaultTally(), newFaultTally(), newFaultTally()
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st int
			var hdr http.Header
			var body string
			var err error
			if i%2 == 0 {
				st, hdr, body, err = chat(p.url(), fmt.Sprintf("hung-%d", i), "hello")
			} else { // the old bypass: a GET asking for an event stream
				req, _ := http.NewRequest("GET", p.url()+"/v1/models", nil)
				req.Header.Set("Accept", "text/event-stream")
				var resp *http.Response
				if resp, err = (&http.Client{Timeout: 30 * time.Second}).Do(req); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					st, hdr, body = resp.StatusCode, resp.Header, string(b)
				}
			}
			if err != nil {
				t.Error(err)
				return
			}
			all.add(st, body)
			if i%2 == 0 {
				posts.add(st, body)
			} else {
				streams.add(st, body)
			}
			check5xx(t, p, st, hdr, body, up.URL, strings.TrimPrefix(up.URL, "http://"))
		}()
	}
	wg.Wait()
	t.Logf("hung upstream, 100 clients: %s (50 POST /v1/chat/completions: %s; 50 GET /v1/models with Accept: text/event-stream: %s); upstream reached %d times; 504 body %s; 429 body %s", all, posts, streams, len(reached), all.bodies[504], all.bodies[429])
	t.Logf("log: %d lines with status 504, e.g. %s", len(p.logLines(`"status":504`)), first(p.logLines(`"status":504`)))
	if len(reached) > 64 {
		t.Errorf("%d requests reached the upstream past the limit of 64", len(reached))
	}
	if all.counts[429] < 36 || all.counts[504]+all.counts[502] > 64 {
		t.Errorf("statuses %s, want ≥36×429 and ≤64 upstream failures", all)
	}
}

// TestFault3000IdleConnections: 3,000 connections that send nothing. The
// server keeps at most --max-conns open (closing the idlest for new ones),
// closes the rest after --header-timeout, and answers a working client
// throughout.
func TestFault3000IdleConnections(t *testing.T) {
	m := startModel(t)
	p := startServe(t, "idle", "--store", "sqlite:"+filepath.Join(t.TempDir(), "m.db"), "--openai-upstream", m.upstream(),
		"--max-conns", "1000", "--header-timeout", "2s", "--idle-timeout", "2s")
	host := strings.TrimPrefix(p.url(), "http://")
	conns := make([]net.Conn, 0, 3000)
	for i := 0; i < 3000; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	st, _, body, err := chat(p.url(), "idle", "still served?")
	if err != nil || st != 200 {
		t.Fatalf("a client among 3,000 idle connections: %d %v %s", st, err, body)
	}
	served := time.Since(start)
	// Every idle connection is closed by the server (EOF) within the
	// header timeout and some slack.
	closed, open := 0, 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, err := bufio.NewReader(c).ReadByte()
			mu.Lock()
			defer mu.Unlock()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open++
			} else {
				closed++
			}
		}()
	}
	wg.Wait()
	t.Logf("3,000 idle connections: a client was served in %v; %d closed by the server, %d still open after 15 s", served.Round(time.Millisecond), closed, open)
	if open > 0 {
		t.Errorf("%d idle connections stayed open", open)
	}
}
