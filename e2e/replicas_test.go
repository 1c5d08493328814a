package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
	"github.com/mnemehq/mneme/window"
)

var (
	replicasDuration = flag.Duration("replicas.duration", 10*time.Second, "how long the replica tests run their load (the issue's figure: 30s)")
	replicasClients  = flag.Int("replicas.clients", 16, "concurrent agents in the replica tests, each on its own thread")
	realExpiry       = flag.Bool("replicas.real-expiry", false, "TestReplicaKill waits for the dead replica's lease to expire by itself (about 130 s: the summarizer timeout's 2×60 s + 10 s) instead of expiring it in the database")
)

// replicaSet is two `mneme serve` processes on one PostgreSQL schema, and
// load spread over them.
type replicaSet struct {
	t      *testing.T
	dsn    string
	m      *model
	names  [2]string
	procs  [2]*serveProc
	sent   [2]atomic.Int64 // attempts sent to each
	agents []*agent

	stop     chan struct{}
	stopOnce sync.Once
	cancel   context.CancelFunc
	errc     chan []error
	waited   bool
}

// startReplicas starts two replicas (summarizers named a and b, no
// background buffering: every summarizer call is on the request path,
// under the thread's compact lease) and the agents, which alternate: an
// agent's request i goes to replica (i+agent) % 2, and to the other one
// when that one is down or does not answer.
func startReplicas(t *testing.T) *replicaSet {
	d := postgresDSN(t)
	r := &replicaSet{t: t, dsn: d, m: startModel(t), names: [2]string{"a", "b"}, stop: make(chan struct{}), errc: make(chan []error, 1)}
	for i, name := range r.names {
		r.procs[i] = startServe(t, "replica-"+name, serveArgs(r.m, d, name, "--buffer=false")...)
	}
	r.agents = make([]*agent, *replicasClients)
	for i := range r.agents {
		r.agents[i] = newAgent(i, fmt.Sprintf("rep-%02d", i))
	}
	hard, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	r.cancel = cancel
	go func() {
		r.errc <- runAgents(r.stop, hard, r.agents, func(a *agent, attempt int) string {
			i := (int(a.acked.Load()) + a.id + attempt) % 2
			u := r.procs[i].url()
			if u == "" {
				i = 1 - i
				u = r.procs[i].url()
			}
			r.sent[i].Add(1)
			return u
		})
	}()
	t.Cleanup(func() { r.wait() })
	return r
}

// wait stops the agents (each finishes its request) and reports their
// errors.
func (r *replicaSet) wait() {
	if r.waited {
		return
	}
	r.waited = true
	r.stopOnce.Do(func() { close(r.stop) })
	errs := <-r.errc
	r.cancel()
	for _, err := range errs {
		if err != nil {
			r.t.Error(err)
		}
	}
}

func (r *replicaSet) acked() (n int) {
	for _, a := range r.agents {
		n += int(a.acked.Load())
	}
	return n
}

// check stops the load and runs the checks on the store: the logs, the
// summarizer calls against the compactions they made, and every window
// rebuilt by a third process.
func (r *replicaSet) check() tally {
	r.wait()
	t := r.t
	st, err := dsn.Open(context.Background(), r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	logs := loadLogs(t, st)
	st.Close()
	n := checkLogs(t, logs, r.agents)
	fresh := startServe(t, "replica-c", serveArgs(r.m, r.dsn, "c", "--buffer=false")...)
	checkWindows(t, fresh.url(), logs)
	fresh.stop()
	return n
}

// TestReplicas (issue 7): two replicas on one PostgreSQL, agents
// alternating between them. Afterwards every log is gapless and holds
// every acknowledged message once; no two compactions of a thread cover
// overlapping ranges; and each replica called its summarizer exactly once
// per compaction it recorded: nothing was summarized twice.
func TestReplicas(t *testing.T) {
	began := time.Now()
	r := startReplicas(t)
	time.Sleep(*replicasDuration)
	n := r.check()
	for _, name := range r.names {
		calls, events := r.m.count(name+"/observer"), n.observed[summarizerModel(name)]
		if calls != events {
			t.Errorf("replica %s: %d observer calls answered for %d observations recorded: a compaction point was summarized more than once (or an observation was lost)", name, calls, events)
		}
		if events == 0 {
			t.Errorf("replica %s recorded no observation: the test did not exercise compaction on both replicas", name)
		}
	}
	t.Logf("%d agents for %s on 2 replicas: %d requests acknowledged (%d to a, %d to b), %d acknowledged messages checked: %d duplicates, %d missing, %d unacknowledged; %d threads, %d events, %d gaps; %d compactions (%d observed by a with %d summarizer calls, %d by b with %d calls), %d overlapping; %d reflections (reflector calls: a %d, b %d); %s",
		len(r.agents), *replicasDuration, r.acked(), r.sent[0].Load(), r.sent[1].Load(), n.messages, n.duplicates, n.missing, n.extra,
		n.threads, n.events, n.gaps, n.compactions,
		n.observed[summarizerModel("a")], r.m.count("a/observer"), n.observed[summarizerModel("b")], r.m.count("b/observer"), n.overlaps,
		n.reflections, r.m.count("a/reflector"), r.m.count("b/reflector"), time.Since(began).Round(time.Millisecond))
}

// markerRe finds the agent of a transcript line.
var markerRe = regexp.MustCompile(`\[c(\d\d) [ur]\d{4}\]`)

// TestReplicaKill (issue 7): replica a is SIGKILLed while it holds a
// thread's compact lease (its summarizer call hangs); the agents fail over
// to b, which goes on serving every thread; the dead replica's lease,
// once expired, is taken over by b, which compacts that thread again; and
// no acknowledged message is lost.
func TestReplicaKill(t *testing.T) {
	began := time.Now()
	r := startReplicas(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	st, err := dsn.Open(ctx, r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	phase := *replicasDuration / 3
	time.Sleep(phase)
	r.m.hangSummarizer("a")
	var hung hungCall
	select {
	case hung = <-r.m.hung:
	case <-time.After(60 * time.Second):
		t.Fatal("replica a made no summarizer call within 60s")
	}
	mk := markerRe.FindSubmatch(hung.body)
	if mk == nil {
		t.Fatalf("cannot tell the thread of the hung summarizer call: %.300s", hung.body)
	}
	agentID, _ := strconv.Atoi(string(mk[1]))
	thread := fmt.Sprintf("rep-%02d", agentID)
	owner, live, err := compactLease(ctx, db, thread)
	if err != nil || !live {
		t.Fatalf("thread %s: replica a is summarizing it, yet its compact lease is not held (owner %q, live %v, %v)", thread, owner, live, err)
	}
	ackedAtKill := r.acked()
	killSeq := lastSeq(t, st, thread)
	r.procs[0].kill()
	killedAt := time.Now()
	t.Logf("replica a SIGKILLed while summarizing thread %s under compact lease of %s", thread, owner)

	// b carries on alone; the dead replica's lease stays.
	time.Sleep(phase)
	if o, live, err := compactLease(ctx, db, thread); err != nil || o != owner || !live {
		t.Fatalf("thread %s: the dead replica's lease should still be held: owner %q (dead: %q), live %v, %v", thread, o, owner, live, err)
	}
	ackedAlone := r.acked() - ackedAtKill

	// The lease expires: by itself (-replicas.real-expiry) or, by
	// default, by moving its expiry to now in the database, which is
	// what the passing of its TTL does.
	if *realExpiry {
		for {
			_, live, err := compactLease(ctx, db, thread)
			if err != nil {
				t.Fatal(err)
			}
			if !live {
				break
			}
			time.Sleep(time.Second)
		}
	} else if _, err := db.Exec(ctx, `UPDATE leases SET expires = clock_timestamp() WHERE tenant = $1 AND thread = $2 AND name = 'compact' AND owner = $3`, tenant, thread, owner); err != nil {
		t.Fatal(err)
	}
	expiredAt := time.Now()
	expiredSeq := lastSeq(t, st, thread)
	// Meanwhile b compacted the thread without the lease whenever its
	// window no longer fitted (after waiting for the holder in vain).
	evs, err := st.Load(ctx, tenant, thread, killSeq+1, int(expiredSeq-killSeq))
	if err != nil {
		t.Fatal(err)
	}
	withoutLease := 0
	for _, ev := range evs {
		if ev.Kind == store.KindCompacted {
			withoutLease++
		}
	}

	// b takes the lease over at its next compaction of the thread (and
	// releases it after): the dead owner's row is gone and a compaction
	// summarized by b follows.
	var takenBy string
	var takeoverSeq int64
	deadline := time.Now().Add(2 * time.Minute)
	for takeoverSeq == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("thread %s: no compaction by replica b within 2 minutes of the dead replica's lease expiring", thread)
		}
		time.Sleep(10 * time.Millisecond)
		o, _, err := compactLease(ctx, db, thread)
		if err != nil {
			t.Fatal(err)
		}
		if o == owner {
			continue // not taken over yet
		}
		if o != "" {
			takenBy = o
		}
		evs, err := st.Load(ctx, tenant, thread, expiredSeq+1, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			var d window.CompactedData
			if ev.Kind == store.KindCompacted && json.Unmarshal(ev.Data, &d) == nil && d.Model == summarizerModel("b") {
				takeoverSeq = ev.Seq
				break
			}
		}
	}
	if takenBy == "" {
		takenBy = "(released before it was sampled)"
	}
	n := r.check()
	calls, events := r.m.count("b/observer"), n.observed[summarizerModel("b")]
	if calls != events {
		t.Errorf("replica b: %d observer calls answered for %d observations recorded", calls, events)
	}
	if ackedAlone == 0 {
		t.Error("no request was answered while replica a was dead")
	}
	t.Logf("%d agents, 2 replicas, a killed after %s: %d requests acknowledged (%d by b alone in the %s after the kill); thread %s's lease of dead %s expired after %s (%s; meanwhile b compacted the thread %d times without it) and was taken over by %s, which compacted at seq %d (%s after expiry); %d acknowledged messages checked: %d duplicates, %d missing, %d unacknowledged; %d threads, %d gaps; %d compactions (a %d, b %d with %d calls), %d overlapping; %s",
		len(r.agents), killedAt.Sub(began).Round(time.Millisecond), r.acked(), ackedAlone, phase.Round(time.Millisecond), thread, owner, expiredAt.Sub(killedAt).Round(time.Second), map[bool]string{true: "its TTL", false: "expired in the database"}[*realExpiry], withoutLease, takenBy, takeoverSeq, time.Since(expiredAt).Round(time.Millisecond),
		n.messages, n.duplicates, n.missing, n.extra, n.threads, n.gaps, n.compactions, n.observed[summarizerModel("a")], events, calls, n.overlaps, time.Since(began).Round(time.Millisecond))
}

// compactLease returns the owner of a thread's compact lease and whether
// it is unexpired ("" when there is no lease row).
func compactLease(ctx context.Context, db *pgx.Conn, thread string) (owner string, live bool, err error) {
	err = db.QueryRow(ctx, `SELECT owner, expires > clock_timestamp() FROM leases WHERE tenant = $1 AND thread = $2 AND name = 'compact'`, tenant, thread).Scan(&owner, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return owner, live, err
}

// lastSeq returns the thread's last seq.
func lastSeq(t *testing.T, st store.Store, thread string) int64 {
	t.Helper()
	evs, err := st.Load(context.Background(), tenant, thread, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(evs))
}
