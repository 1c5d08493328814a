package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store/postgres/pgtest"
)

// The binary is built once per test run, into a directory TestMain removes.
var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	errBuild  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// mnemeBin returns the path of a freshly built `mneme` binary, or of the
// binary MNEME_BIN names: the black-box tests then run against that build
// (scripts/old-code-proof runs them against the code before the hardening
// of issue 17, to show which of them fail there).
func mnemeBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if b := os.Getenv("MNEME_BIN"); b != "" {
			binPath, errBuild = filepath.Abs(b)
			return
		}
		root, err := moduleRoot()
		if err != nil {
			errBuild = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "mneme-e2e-"); err != nil {
			errBuild = err
			return
		}
		binPath = filepath.Join(buildDir, "mneme")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/mneme")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			errBuild = fmt.Errorf("go build ./cmd/mneme: %w\n%s", err, out)
		}
	})
	if errBuild != nil {
		t.Fatal(errBuild)
	}
	return binPath
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the module")
	}
	return filepath.Dir(mod), nil
}

// serveProc is one `mneme serve` process. kill and stop may be called from
// any goroutine; a stopped process can be started again with restart.
type serveProc struct {
	t    testing.TB
	name string
	bin  string // the command it runs: the binary, or a wrapper of it
	args []string
	logs string // the directory of its stderr files, one per start

	mu     sync.Mutex
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT of the running process
	done   chan struct{}
	starts int

	pending []string // request ids whose log lines a fault test awaits

	// anyHealth: restart waits for /healthz to answer at all, not for a
	// 200 (a fault test starting a server on a store that cannot write).
	anyHealth bool
}

var listenLine = regexp.MustCompile(`listening on (http://[0-9.]+:[0-9]+)`)

// startServe starts `mneme serve` with args (plus a loopback --addr on a
// free port) and waits until /healthz answers. The process is killed when
// the test ends.
func startServe(t testing.TB, name string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{t: t, name: name, bin: mnemeBin(t), args: args, logs: t.TempDir()}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.dumpLogs()
		}
	})
	if err := p.restart(); err != nil {
		t.Fatal(err)
	}
	return p
}

// url returns the base URL of the running process ("" when stopped).
func (p *serveProc) url() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base
}

// restart starts the process (again); it must not be running.
func (p *serveProc) restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	p.starts++
	logf, err := os.Create(filepath.Join(p.logs, fmt.Sprintf("%s-%03d.log", p.name, p.starts)))
	if err != nil {
		return err
	}
	addrc := make(chan string, 1)
	cmd := exec.Command(p.bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "warn"}, supportedFlags(p.t, p.args)...)...)
	cmd.Env = cleanEnv()
	cmd.Stdout = io.Discard
	cmd.Stderr = &lineWatcher{w: logf, found: addrc}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	var base string
	select {
	case base = <-addrc:
	case <-done:
		return fmt.Errorf("%s: exited before listening: %s", p.name, tail(logf.Name(), 20))
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s: not listening after 30s: %s", p.name, tail(logf.Name(), 20))
	}
	if err := waitHealthy(base, done, p.anyHealth); err != nil {
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s: %w: %s", p.name, err, tail(logf.Name(), 20))
	}
	p.cmd, p.base, p.done = cmd, base, done
	return nil
}

// supportedFlags returns args without the flags (and their values) that
// the binary's `serve --help` does not list, when the binary is MNEME_BIN:
// an older build lacks the limits' flags (--max-conns, --idle-timeout, ...)
// and runs with its own defaults, which is what the test must show. With
// the binary built from this tree every flag is passed as it is, so a
// misspelt flag still fails.
func supportedFlags(t testing.TB, args []string) []string {
	if os.Getenv("MNEME_BIN") == "" {
		return args
	}
	helpOnce.Do(func() {
		out, _ := exec.Command(mnemeBin(t), "serve", "--help").CombinedOutput()
		helpText = string(out)
	})
	var kept []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			kept = append(kept, a)
			continue
		}
		name, _, hasValue := strings.Cut(a, "=")
		if strings.Contains(helpText, "      "+name+" ") {
			kept = append(kept, a)
			continue
		}
		// Dropped with its value (the next argument, when the flag has
		// no "=" and the next one is not a flag).
		dropped := a
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			i++
			dropped += " " + args[i]
		}
		t.Logf("MNEME_BIN has no %s flag: dropped %q (the binary runs with its default)", name, dropped)
	}
	return kept
}

var (
	helpOnce sync.Once
	helpText string
)

// kill sends SIGKILL and waits for the process to be gone. Killing a
// stopped process does nothing.
func (p *serveProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.base = nil, ""
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop shuts the process down gracefully (SIGTERM), killing it if it
// takes more than ten seconds.
func (p *serveProc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.base = nil, ""
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// dumpLogs prints the end of every stderr file the process wrote.
func (p *serveProc) dumpLogs() {
	files, _ := filepath.Glob(filepath.Join(p.logs, "*.log"))
	for _, f := range files {
		if s := tail(f, 15); strings.TrimSpace(s) != "" {
			p.t.Logf("%s:\n%s", filepath.Base(f), s)
		}
	}
}

// cleanEnv is the test's environment without the variables `mneme serve`
// reads its settings from, so that the flags alone configure it.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MNEME_") || k == "OPENAI_API_KEY" || k == "ANTHROPIC_API_KEY" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// waitHealthy polls GET /healthz until it answers 200 (or anything, with
// anyStatus).
func waitHealthy(base string, exited <-chan struct{}, anyStatus bool) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || anyStatus {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("exited before it was healthy")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("/healthz did not answer 200 within 30s")
}

// lineWatcher copies a process's stderr to w and reports the address of
// the first "listening on" line.
type lineWatcher struct {
	w     io.Writer
	found chan string
	buf   []byte
	sent  bool
}

func (l *lineWatcher) Write(b []byte) (int, error) {
	l.w.Write(b)
	if l.sent {
		return len(b), nil
	}
	l.buf = append(l.buf, b...)
	if m := listenLine.FindSubmatch(l.buf); m != nil {
		l.found <- string(m[1])
		l.sent, l.buf = true, nil
	} else if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
		l.buf = l.buf[i+1:]
	}
	return len(b), nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// postgresDSN returns MNEME_TEST_POSTGRES with search_path set to a schema
// of the test's own, dropped when the test ends. Without the variable the
// test skips, except under CI=true, where PostgreSQL parts must run.
func postgresDSN(t testing.TB) string { return pgtest.DSN(t, "mneme_e2e") }
