package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store/dsn"
)

var (
	crashKills   = flag.Int("crash.kills", 5, "SIGKILLs per backend in TestCrash (the full run: 50)")
	crashClients = flag.Int("crash.clients", 8, "concurrent agents in TestCrash, each on its own thread")
	crashSeed    = flag.Uint64("crash.seed", 0, "seed of TestCrash's kill moments (0: from the clock; the test logs it)")
)

// serveArgs are the flags of a `mneme serve` on store d in front of m,
// with a small budget so that compactions happen every few turns, and an
// LLM summarizer (m again) that names itself name.
func serveArgs(m *model, d, name string, extra ...string) []string {
	return append([]string{
		"--store", d,
		"--openai-upstream", m.upstream(),
		"--summarizer-url", m.summarizerURL(name),
		"--summarizer-model", summarizerModel(name),
		"--budget-tokens", "4000",
		"--reserve-output", "200",
		"--policy", `{"min_tail_turns":2,"min_tail_tokens":600,"evict_over_tokens":1200}`,
	}, extra...)
}

// TestCrash (issue 10): agents resending their whole history through
// `mneme serve` while the server is SIGKILLed at random moments and
// restarted on the same store. Afterwards every acknowledged message is in
// its thread's log exactly once and in order, every log is gapless, and
// every thread's window rebuilds in a fresh process.
func TestCrash(t *testing.T) {
	backends := []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "mneme.db") }},
		{"postgres", func(t *testing.T) string { return postgresDSN(t) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { runCrash(t, b.dsn(t)) })
	}
}

func runCrash(t *testing.T, d string) {
	began := time.Now()
	m := startModel(t)
	srv := startServe(t, "serve", serveArgs(m, d, "crash")...)
	agents := make([]*agent, *crashClients)
	for i := range agents {
		agents[i] = newAgent(i, fmt.Sprintf("crash-%02d", i))
	}

	// The agents retry whatever gets no answer until it does: the hard
	// deadline only ends a test that would hang.
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	hard, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	errc := make(chan []error, 1)
	go func() {
		errc <- runAgents(stop, hard, agents, func(*agent, int) string { return srv.url() })
	}()
	finished := false
	defer func() { // a test that fails early still waits for its agents
		if !finished {
			halt()
			cancel()
			<-errc
		}
	}()

	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("kill moments: -crash.seed=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for k := 0; k < *crashKills; k++ {
		time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		srv.kill()
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond) // the agents find it down
		if err := srv.restart(); err != nil {
			t.Fatalf("restart after kill %d: %v", k+1, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // every agent gets answers from the last process
	halt()
	errs := <-errc
	finished = true
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	srv.stop()

	st, err := dsn.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	logs := loadLogs(t, st)
	searched := checkSearch(t, st, logs)
	st.Close()
	n := checkLogs(t, logs, agents)

	if err := srv.restart(); err != nil {
		t.Fatal(err)
	}
	checkWindows(t, srv.url(), logs)
	srv.stop()
	snaps := checkSnapshotReplay(t, srv, d, logs)

	var requests, retries, forks int
	for _, a := range agents {
		requests += int(a.acked.Load())
		retries += a.retries
		forks += a.forks
	}
	t.Logf("%d kills, %d requests acknowledged (%d attempts retried, %d answered from a fork), %d acknowledged messages checked: %d duplicates, %d missing, %d unacknowledged; %d threads (%d forks), %d events, %d gaps; %d compactions (%d by the summarizer), %d reflections; %d window snapshots, their windows identical to the replays; %d user turns found by a search of their invoice id; %s",
		*crashKills, requests, retries, forks, n.messages, n.duplicates, n.missing, n.extra,
		n.threads, n.forkThreads, n.events, n.gaps, n.compactions, n.observed[summarizerModel("crash")], n.reflections, snaps, searched, time.Since(began).Round(time.Millisecond))
	if requests < 2*len(agents) {
		t.Errorf("only %d requests acknowledged: the load did not run", requests)
	}
}
