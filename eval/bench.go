package eval

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// The strategies the bench compares: four baselines, then Mneme's.
const (
	StrategyFull       = "full-history"
	StrategyLastN      = "last-n"
	StrategyTokenTrim  = "token-trim"
	StrategySummarize  = "summarize-90"
	StrategyMask       = "mneme-mask"
	StrategyArchive    = "mneme-archive"
	StrategyObserve    = "mneme-observe"
	StrategyObserveLLM = "mneme-observe-llm"
)

// Strategies lists every strategy in report order.
var Strategies = []string{StrategyFull, StrategyLastN, StrategyTokenTrim, StrategySummarize, StrategyMask, StrategyArchive, StrategyObserve, StrategyObserveLLM}

// StrategyDescriptions say in a line what each strategy does.
var StrategyDescriptions = map[string]string{
	StrategyFull:       "the whole history every call (no management)",
	StrategyLastN:      "system prompt + the last N messages",
	StrategyTokenTrim:  "LangChain trim_messages(strategy=last, max_tokens=budget, start_on=human)",
	StrategySummarize:  "summarize everything but the last messages at 90% of the budget (extractive summary)",
	StrategyMask:       "Mneme, strategy mask: old tool results → placeholders, then a catalogue",
	StrategyArchive:    "Mneme, strategy archive: the middle leaves as a catalogue",
	StrategyObserve:    "Mneme, strategy observe, extractive summarizer",
	StrategyObserveLLM: "Mneme, strategy observe, LLM summarizer (the scripted fakellm model)",
}

// DefaultStrategy is the row of Mneme's default policy (no summarizer
// model configured).
func DefaultStrategy() string { return "mneme-" + string(window.DefaultPolicy().Strategy) }

// BenchConfig configures Bench. Zero fields take the defaults below.
type BenchConfig struct {
	Profile string // default coding
	Turns   int    // model calls; default 300
	Seed    uint64
	// Model and BudgetTokens set the pretend model's context window
	// (default gpt-4o's tokenizer with a 32,000-token window, so that a
	// 300-turn session overflows it many times); ReserveOutputTokens is
	// kept for the reply (default 4,096).
	Model               string
	BudgetTokens        int
	ReserveOutputTokens int
	// LastN is the last-N baseline's N (default 40 messages); KeepMessages
	// what summarize-90 keeps verbatim (default 20, pydantic-deep's).
	LastN        int
	KeepMessages int
	// TopK is how many archive hits a probe reads (default 3).
	TopK int
	// Strategies to run (default all), in Strategies order.
	Strategies []string
	// Progress, when set, gets a progress bar (a terminal's stderr).
	Progress io.Writer
}

func (c *BenchConfig) defaults() {
	if c.Profile == "" {
		c.Profile = ProfileCoding
	}
	if c.Turns == 0 {
		c.Turns = 300
	}
	if c.Model == "" {
		c.Model = "gpt-4o"
	}
	if c.BudgetTokens == 0 {
		c.BudgetTokens = 32000
	}
	if c.ReserveOutputTokens == 0 {
		c.ReserveOutputTokens = 4096
	}
	if c.LastN == 0 {
		c.LastN = 40
	}
	if c.KeepMessages == 0 {
		c.KeepMessages = 20
	}
	if c.TopK == 0 {
		c.TopK = 3
	}
	if len(c.Strategies) == 0 {
		c.Strategies = Strategies
	}
}

// Record is one strategy's figures over the session.
type Record struct {
	Strategy    string `json:"strategy"`
	Description string `json:"description"`
	// Default marks Mneme's default strategy.
	Default bool `json:"default"`
	// FactAvailability: the share of planted facts (at their latest value)
	// in the last window, or in the top TopK archive hits of their probe.
	FactAvailability float64 `json:"fact_availability"`
	Facts            int     `json:"facts"`
	FactsAvailable   int     `json:"facts_available"`
	FactsInWindow    int     `json:"facts_in_window"`
	// SupersededErrors: facts whose old value is available without the
	// new one.
	SupersededErrors int `json:"superseded_errors"`
	// TokensSent is the sum of every call's window; TokensSentRatio that
	// over the full-history baseline's.
	TokensSent      int64   `json:"tokens_sent"`
	TokensSentRatio float64 `json:"tokens_sent_ratio"`
	PeakWindow      int     `json:"peak_window_tokens"`
	FinalWindow     int     `json:"final_window_tokens"`
	// CompressionRatio: the full history's tokens at the last call over
	// the last window's.
	CompressionRatio float64 `json:"compression_ratio"`
	// OverBudgetCalls: calls whose window exceeded the usable budget (a
	// real API would have refused them).
	OverBudgetCalls int `json:"over_budget_calls"`
	// ToolPairViolations: orphan results and dangling calls summed over
	// every window sent.
	ToolPairViolations int `json:"tool_pair_violations"`
	// PrefixStableRatio: the share of calls (after the first) whose
	// window starts with the previous call's whole window, so that a
	// provider's prompt cache serves all of it.
	PrefixStableRatio float64 `json:"prefix_stable_ratio"`
	Calls             int     `json:"calls"`
	Compactions       int     `json:"compactions"`
	// Summarizer names the model that wrote observations ("" when none
	// did); Fallbacks counts compactions where it failed and the
	// deterministic fallback ran instead.
	Summarizer string `json:"summarizer,omitempty"`
	Fallbacks  int    `json:"compaction_fallbacks"`
	// Time to build a window (append included), in microseconds.
	WindowUsP50 float64 `json:"window_us_p50"`
	WindowUsP95 float64 `json:"window_us_p95"`
	// WindowTokens is the window's size at every call (the chart).
	WindowTokens []int  `json:"window_tokens_per_call"`
	Error        string `json:"error,omitempty"`
}

// BenchReport is a whole bench run.
type BenchReport struct {
	Profile      string   `json:"profile"`
	Turns        int      `json:"turns"`
	Seed         uint64   `json:"seed"`
	Model        string   `json:"model"`
	BudgetTokens int      `json:"budget_tokens"`
	UsableTokens int      `json:"usable_tokens"`
	TopK         int      `json:"top_k"`
	Facts        []Fact   `json:"facts"`
	Records      []Record `json:"records"`
}

// Bench generates the session and replays it against each strategy.
func Bench(ctx context.Context, cfg BenchConfig) (*BenchReport, error) {
	cfg.defaults()
	for _, s := range cfg.Strategies {
		if !slices.Contains(Strategies, s) {
			return nil, fmt.Errorf("unknown strategy %q (known: %s)", s, strings.Join(Strategies, ", "))
		}
	}
	sess, err := Generate(cfg.Profile, cfg.Turns, cfg.Seed)
	if err != nil {
		return nil, err
	}
	mod, _ := token.DefaultTable().Lookup(cfg.Model)
	counter, err := token.Get(mod.Tokenizer)
	if err != nil {
		return nil, err
	}
	usable := cfg.BudgetTokens - cfg.ReserveOutputTokens
	if usable <= 0 {
		return nil, fmt.Errorf("budget %d leaves nothing after the %d reserved for output", cfg.BudgetTokens, cfg.ReserveOutputTokens)
	}
	rep := &BenchReport{Profile: cfg.Profile, Turns: cfg.Turns, Seed: cfg.Seed, Model: cfg.Model, BudgetTokens: cfg.BudgetTokens, UsableTokens: usable, TopK: cfg.TopK, Facts: sess.Facts}
	// The full-history baseline runs first: the others' ratios need it.
	order := append([]string{StrategyFull}, slices.DeleteFunc(slices.Clone(cfg.Strategies), func(s string) bool { return s == StrategyFull })...)
	var full *Record
	for _, name := range order {
		rec := runStrategy(ctx, cfg, sess, counter, usable, name)
		if name == StrategyFull {
			full = &rec
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		rep.Records = append(rep.Records, rec)
	}
	for i := range rep.Records {
		r := &rep.Records[i]
		if full != nil && full.TokensSent > 0 {
			r.TokensSentRatio = float64(r.TokensSent) / float64(full.TokensSent)
		}
		if full != nil && r.FinalWindow > 0 {
			r.CompressionRatio = float64(full.FinalWindow) / float64(r.FinalWindow)
		}
	}
	if !slices.Contains(cfg.Strategies, StrategyFull) {
		rep.Records = rep.Records[1:]
	}
	slices.SortStableFunc(rep.Records, func(a, b Record) int {
		return slices.Index(Strategies, a.Strategy) - slices.Index(Strategies, b.Strategy)
	})
	return rep, nil
}

// newStrategy builds a strategy by name.
func newStrategy(ctx context.Context, cfg BenchConfig, c token.Counter, usable int, name string) (contextStrategy, error) {
	p := window.DefaultPolicy()
	p.Model, p.BudgetTokens, p.ReserveOutputTokens = cfg.Model, cfg.BudgetTokens, cfg.ReserveOutputTokens
	switch name {
	case StrategyFull:
		return &fullHistory{h: history{c: c}}, nil
	case StrategyLastN:
		return &lastN{h: history{c: c}, n: cfg.LastN}, nil
	case StrategyTokenTrim:
		return &tokenTrim{h: history{c: c}, budget: usable}, nil
	case StrategySummarize:
		return &summarizeAll{c: c, budget: usable, keep: cfg.KeepMessages, live: history{c: c}}, nil
	case StrategyMask:
		p.Strategy = window.Mask
		return newMnemeStrategy(ctx, p, mneme.Config{}, cfg.Seed, nil)
	case StrategyArchive:
		p.Strategy = window.Archive
		return newMnemeStrategy(ctx, p, mneme.Config{}, cfg.Seed, nil)
	case StrategyObserve:
		p.Strategy = window.Observe
		return newMnemeStrategy(ctx, p, mneme.Config{Summarizer: compact.LLMConfig{}}, cfg.Seed, nil)
	case StrategyObserveLLM:
		p.Strategy = window.Observe
		srv := fakellm.Start()
		s, err := newMnemeStrategy(ctx, p, mneme.Config{Summarizer: compact.LLMConfig{URL: srv.URL(), Model: "gpt-4o-mini", APIKey: "bench"}}, cfg.Seed, srv.Close)
		if err != nil {
			srv.Close()
		}
		return s, err
	}
	return nil, fmt.Errorf("unknown strategy %q", name)
}

// runStrategy replays the session through one strategy and measures it.
func runStrategy(ctx context.Context, cfg BenchConfig, sess *Session, c token.Counter, usable int, name string) Record {
	rec := Record{Strategy: name, Description: StrategyDescriptions[name], Default: name == DefaultStrategy(), Facts: len(sess.Facts)}
	if name == StrategyLastN {
		rec.Description = fmt.Sprintf("system prompt + the last %d messages", cfg.LastN)
	}
	s, err := newStrategy(ctx, cfg, c, usable, name)
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	defer s.Close()
	bar := newProgress(cfg.Progress, name, len(sess.Turns))
	defer bar.done()
	var prev, win []message.Message
	var times []time.Duration
	stable := 0
	for i, turn := range sess.Turns {
		if ctx.Err() != nil {
			rec.Error = ctx.Err().Error()
			return rec
		}
		msgs := datedMessages(i, turn)
		start := time.Now()
		w, tokens, err := s.Call(ctx, msgs)
		times = append(times, time.Since(start))
		if err != nil {
			rec.Error = fmt.Sprintf("turn %d: %v", i+1, err)
			return rec
		}
		prev, win = win, w
		rec.Calls++
		rec.WindowTokens = append(rec.WindowTokens, tokens)
		rec.TokensSent += int64(tokens)
		rec.PeakWindow = max(rec.PeakWindow, tokens)
		if tokens > usable {
			rec.OverBudgetCalls++
		}
		rec.ToolPairViolations += len(ToolPairViolations(w))
		if i > 0 {
			if ok, _ := isPrefixFast(prev, w); ok {
				stable++
			}
		}
		bar.set(i + 1)
	}
	rec.FinalWindow = rec.WindowTokens[len(rec.WindowTokens)-1]
	if rec.Calls > 1 {
		rec.PrefixStableRatio = float64(stable) / float64(rec.Calls-1)
	}
	rec.Compactions = s.Compactions()
	if ms, ok := s.(*mnemeStrategy); ok {
		if err := ms.provenance(ctx, &rec); err != nil {
			rec.Error = err.Error()
			return rec
		}
	}
	slices.Sort(times)
	rec.WindowUsP50 = float64(times[len(times)/2].Nanoseconds()) / 1000
	rec.WindowUsP95 = float64(times[len(times)*95/100].Nanoseconds()) / 1000
	if err := probeFacts(ctx, &rec, s, win, sess.Facts, cfg.TopK); err != nil {
		rec.Error = err.Error()
	}
	return rec
}

// probeFacts asks every probe at the end of the session: a fact is
// available when its latest value is in the window or in the top k hits
// of the archive search for its probe.
func probeFacts(ctx context.Context, rec *Record, s contextStrategy, win []message.Message, facts []Fact, k int) error {
	text := WindowText(win)
	for _, f := range facts {
		avail := text
		inWindow := strings.Contains(text, f.Value)
		hits, err := s.Recall(ctx, f.Probe, k)
		if err != nil {
			return fmt.Errorf("probe %q: %w", f.Probe, err)
		}
		if len(hits) > 0 {
			avail += "\n" + strings.Join(hits, "\n")
		}
		has := strings.Contains(avail, f.Value)
		if inWindow {
			rec.FactsInWindow++
		}
		if has {
			rec.FactsAvailable++
		}
		if f.Old != "" && !has && strings.Contains(avail, f.Old) {
			rec.SupersededErrors++
		}
	}
	if rec.Facts > 0 {
		rec.FactAvailability = float64(rec.FactsAvailable) / float64(rec.Facts)
	}
	return nil
}

// isPrefixFast is IsPrefix with a cheap first test: unchanged messages
// are usually the very same values.
func isPrefixFast(prev, cur []message.Message) (bool, int) {
	if len(prev) > len(cur) {
		return IsPrefix(prev, cur)
	}
	for i := range prev {
		if !reflect.DeepEqual(prev[i], cur[i]) && !sameMessage(prev[i], cur[i]) {
			return false, i
		}
	}
	return true, len(prev)
}

// progress draws a one-line bar on a terminal's stderr.
type progress struct {
	w     io.Writer
	name  string
	total int
	last  int
}

func newProgress(w io.Writer, name string, total int) *progress {
	return &progress{w: w, name: name, total: total, last: -1}
}

func (p *progress) set(n int) {
	if p.w == nil || p.total == 0 {
		return
	}
	pct := n * 100 / p.total
	if pct == p.last {
		return
	}
	p.last = pct
	const width = 30
	fill := n * width / p.total
	fmt.Fprintf(p.w, "\r%-18s [%s%s] %3d%% %d/%d", p.name, strings.Repeat("#", fill), strings.Repeat(".", width-fill), pct, n, p.total)
}

func (p *progress) done() {
	if p.w != nil {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
