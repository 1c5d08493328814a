package eval

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/window"
)

// Options configures Run.
type Options struct {
	// Store, when set, holds every fixture's thread (each under a thread id
	// of its own); nil: a fresh in-memory store per fixture.
	Store store.Store
	// Tenant the threads belong to (default "eval").
	Tenant string
	// Compactor writes observations for the observe strategy (nil: the
	// engine's default, the extractive summarizer).
	Compactor mneme.Compactor
}

// Result is what one fixture's run found.
type Result struct {
	Fixture string        `json:"fixture"`
	Path    string        `json:"path,omitempty"`
	Source  string        `json:"source,omitempty"`
	Passed  int           `json:"passed"`
	Total   int           `json:"total"`
	Checks  []CheckResult `json:"checks,omitempty"`
	// WindowTokens is the last window's size; FullTokens what the whole
	// history would cost sent as is; Ratio = WindowTokens / FullTokens.
	WindowTokens int     `json:"window_tokens"`
	FullTokens   int64   `json:"full_tokens"`
	Ratio        float64 `json:"ratio"`
	Compactions  int     `json:"compactions"`
	DurationMS   float64 `json:"duration_ms"`
	// Error says why the fixture could not run (invalid, or the engine
	// failed): a failure, never a pass.
	Error string `json:"error,omitempty"`
}

// OK reports whether the fixture ran and every check passed.
func (r Result) OK() bool { return r.Error == "" && r.Total > 0 && r.Passed == r.Total }

// CheckResult is one check's outcome; Detail says what was found when it
// failed.
type CheckResult struct {
	Check  string `json:"check"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail,omitempty"`
}

// epoch dates turns that carry no "at": a fixed clock, one minute a turn.
var epoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

var runSeq atomic.Int64

// Run replays f on a fresh thread and evaluates its checks, each right
// after its turn (so recall and readability are judged on the store as it
// stood then). It never returns a passing Result for an invalid fixture.
func Run(ctx context.Context, f *Fixture, opts Options) Result {
	start := time.Now()
	res := Result{Fixture: f.Name, Path: f.Path, Source: f.Source, Total: len(f.Checks)}
	fail := func(err error) Result {
		res.Error = err.Error()
		res.DurationMS = ms(time.Since(start))
		return res
	}
	if err := f.Validate(); err != nil {
		return fail(err)
	}
	pol, err := f.policy()
	if err != nil {
		return fail(err)
	}
	st := opts.Store
	if st == nil {
		st = inmem.New()
		defer st.Close()
	}
	tenant := opts.Tenant
	if tenant == "" {
		tenant = "eval"
	}
	m, err := mneme.Open(ctx, mneme.Config{Store: st, Policy: &pol, Compactor: opts.Compactor})
	if err != nil {
		return fail(err)
	}
	defer m.Close()
	id := fmt.Sprintf("eval-%s-%d-%d", slug(f.Name), time.Now().UnixNano(), runSeq.Add(1))
	th := m.Thread(tenant, id)

	byTurn := map[int][]int{}
	for i, c := range f.Checks {
		byTurn[c.AfterTurn] = append(byTurn[c.AfterTurn], i)
	}
	res.Checks = make([]CheckResult, len(f.Checks))
	var prev, w *window.Window
	for i, turn := range f.Turns {
		msgs, err := turn.decode()
		if err != nil {
			return fail(fmt.Errorf("turn %d: %w", i+1, err))
		}
		at := epoch.Add(time.Duration(i) * time.Minute)
		if turn.At != nil {
			at = turn.At.UTC()
		}
		for j := range msgs {
			msgs[j].Time = at
		}
		prev = w
		if _, w, err = th.AppendWindow(ctx, msgs, mneme.WindowOptions{}); err != nil {
			return fail(fmt.Errorf("turn %d: %w", i+1, err))
		}
		env := &checkEnv{store: st, tenant: tenant, thread: th, window: w, prev: prev}
		for _, ci := range byTurn[i+1] {
			c := f.Checks[ci]
			pass, detail, err := env.run(ctx, c)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", c.Label(ci), err))
			}
			res.Checks[ci] = CheckResult{Check: c.Label(ci), Pass: pass, Detail: detail}
			if pass {
				res.Passed++
			}
		}
	}
	res.WindowTokens = w.Usage.Total
	res.FullTokens = w.Usage.ThreadTokens + int64(w.Usage.System+w.Usage.Tools+window.ReplyPrimer)
	if res.FullTokens > 0 {
		res.Ratio = float64(res.WindowTokens) / float64(res.FullTokens)
	}
	res.Compactions = w.Usage.Compactions
	res.DurationMS = ms(time.Since(start))
	return res
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 40 {
		out = out[:40]
	}
	if out == "" {
		out = "fixture"
	}
	return out
}

// WriteTable prints one row per result and, under the table, every failed
// check and error with its detail.
func WriteTable(out io.Writer, results []Result) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIXTURE\tCHECKS\tWINDOW TOK\tFULL TOK\tRATIO\tCOMPACTIONS\tTIME\t")
	for _, r := range results {
		status := fmt.Sprintf("%d/%d", r.Passed, r.Total)
		if r.Error != "" {
			status = "ERROR"
		} else if !r.OK() {
			status += " FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%d\t%.1fms\t\n", r.Fixture, status, r.WindowTokens, r.FullTokens, r.Ratio, r.Compactions, r.DurationMS)
	}
	tw.Flush()
	failed := 0
	for _, r := range results {
		if r.Error != "" {
			failed++
			fmt.Fprintf(out, "\nERROR %s: %s\n", r.Fixture, r.Error)
			continue
		}
		for _, c := range r.Checks {
			if !c.Pass {
				fmt.Fprintf(out, "\nFAIL %s: %s: %s\n", r.Fixture, c.Check, c.Detail)
			}
		}
		if !r.OK() {
			failed++
		}
	}
	fmt.Fprintf(out, "\n%d fixtures, %d passed, %d failed\n", len(results), len(results)-failed, failed)
}
