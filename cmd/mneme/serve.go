package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/proxy"
	"github.com/mnemehq/mneme/server"
	"github.com/mnemehq/mneme/store/dsn"
	"github.com/mnemehq/mneme/window"
)

func init() { extraCommands = append(extraCommands, serveCmd) }

// serveOptions are the settings of `mneme serve`. Each comes from, in order
// of precedence: its flag, its environment variable, the config file, the
// default.
type serveOptions struct {
	config string

	addr     string
	store    string
	insecure bool
	authFile string
	authKeys string

	openaiUpstream    string
	anthropicUpstream string
	openaiKey         string
	anthropicKey      string
	upstreamTimeout   time.Duration
	maxBodyMiB        int
	cacheMiB          int
	recallRounds      int
	tenantConcurrency int
	retain            string
	maxConns          int
	headerTimeout     time.Duration
	bodyTimeout       time.Duration
	idleTimeout       time.Duration

	model         string
	budgetTokens  int
	reserveOutput int
	trigger       string
	target        string
	strategy      string
	policyJSON    string

	summarizerURL   string
	summarizerAPI   string
	summarizerModel string
	summarizerKey   string
	summarizerWait  time.Duration
	buffer          bool

	shutdownTimeout time.Duration
	logLevel        string
	logFormat       string

	demo      bool
	demoTurns int
}

// envAliases are the conventional variables some settings are also read
// from, after their MNEME_* name.
var envAliases = map[string]string{
	"openai-key":    "OPENAI_API_KEY",
	"anthropic-key": "ANTHROPIC_API_KEY",
	// compact.APIKeyEnv, the summarizer's own variable.
	"summarizer-key": "MNEME_SUMMARIZER_API_KEY",
}

func envName(flag string) string {
	return "MNEME_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func serveCmd() *cobra.Command { return newServeCmd(&serveOptions{}) }

// newServeCmd returns the command, its flags bound to o.
func newServeCmd(o *serveOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve the OpenAI and Anthropic APIs through Mneme (a drop-in proxy)",
		Long: `Serve POST /v1/chat/completions (OpenAI) and POST /v1/messages (Anthropic),
streaming and not, through Mneme: point an agent's OPENAI_BASE_URL
(http://127.0.0.1:8787/v1) or ANTHROPIC_BASE_URL (http://127.0.0.1:8787) at
it and each request's history is replaced by a window that fits the budget,
while the thread's log keeps everything. Other /v1/* routes are forwarded
as they are.

Threads: header X-Mneme-Thread (or Mneme-Thread), else an id derived from
the tenant and the first system and user message. Mode: X-Mneme-Mode resend
(default: the client sends its whole history; only what is new is
appended; an edited history forks a new thread) or append. Responses carry
X-Mneme-Thread, X-Mneme-Window-Tokens, X-Mneme-Thread-Tokens and
X-Mneme-Compacted.

Every setting below is a flag, an environment variable (shown with each
flag), or a key of the JSON config file (--config; keys are flag names),
in that order of precedence.

Auth: --auth FILE (lines "KEY TENANT") or MNEME_AUTH_KEYS=key1=tenantA,...
Clients then send a Mneme key (Authorization: Bearer or x-api-key) and the
upstream key comes from --openai-key / --anthropic-key. Without auth every
request belongs to tenant "default", the client's key is forwarded, and
only a loopback --addr is allowed unless --insecure.

--demo runs everything locally with a built-in fake model: no API key.`,
		Example: `  mneme serve --demo
  mneme serve --openai-key sk-... --budget-tokens 64000
  OPENAI_BASE_URL=http://127.0.0.1:8787/v1 my-agent`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnvAndFile(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), *o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.config, "config", "", "JSON config file: an object whose keys are these flags' names")
	f.StringVar(&o.addr, "addr", server.DefaultAddr, "listen address")
	f.StringVar(&o.store, "store", mneme.DefaultDSN, "store DSN: sqlite:PATH, memory: or postgres://...")
	f.BoolVar(&o.insecure, "insecure", false, "allow a non-loopback --addr without --auth")
	f.StringVar(&o.authFile, "auth", "", `auth file: one "KEY TENANT" a line`)
	f.StringVar(&o.authKeys, "auth-keys", "", "API keys as key1=tenantA,key2=tenantB (prefer the env variable to the flag)")
	f.StringVar(&o.openaiUpstream, "openai-upstream", proxy.DefaultOpenAIUpstream, "base URL of the OpenAI-compatible API")
	f.StringVar(&o.anthropicUpstream, "anthropic-upstream", proxy.DefaultAnthropicUpstream, "base URL of the Anthropic API")
	f.StringVar(&o.openaiKey, "openai-key", "", "OpenAI key the server sends upstream (default: the client's)")
	f.StringVar(&o.anthropicKey, "anthropic-key", "", "Anthropic key the server sends upstream (default: the client's)")
	f.DurationVar(&o.upstreamTimeout, "upstream-timeout", proxy.DefaultUpstreamTimeout, "bound on one request's exchange with the upstream, stream included (504 beyond)")
	f.IntVar(&o.maxBodyMiB, "max-body-mib", proxy.DefaultMaxBodyBytes>>20, "largest request body, in MiB (413 beyond)")
	f.IntVar(&o.cacheMiB, "cache-mib", (proxy.DefaultCacheBytes+mneme.DefaultRequestMemoBytes)>>20, "memory, in MiB, for the caches that let a resend request cost what it adds: two thirds the proxy's (messages decoded and encoded, bodies checked), a third the engine's last request per thread; 0: no caches")
	f.IntVar(&o.tenantConcurrency, "tenant-concurrency", server.DefaultTenantConcurrency, "most requests one tenant may have in flight (429 with Retry-After beyond); -1: no limit")
	f.IntVar(&o.maxConns, "max-conns", server.DefaultMaxConns, "most connections open at once; past it the longest-idle one is closed")
	f.DurationVar(&o.headerTimeout, "header-timeout", server.DefaultHeaderTimeout, "bound on reading a request's headers")
	f.DurationVar(&o.bodyTimeout, "body-timeout", server.DefaultBodyTimeout, "bound on reading a request's body (408 beyond); a body is read before the request takes a tenant's slot")
	f.DurationVar(&o.idleTimeout, "idle-timeout", server.DefaultIdleTimeout, "how long a keep-alive connection may stay idle")
	f.StringVar(&o.retain, "retain", "", `delete threads idle for longer than this, e.g. 30d or 720h (swept at start and hourly); empty: keep forever`)
	f.IntVar(&o.recallRounds, "recall-rounds", proxy.DefaultRecallRounds, "most recall rounds (mneme_search/mneme_read answered by the proxy) per request; -1 offers no recall tools")

	def := mneme.DefaultPolicy()
	f.StringVar(&o.model, "model", def.Model, "default model of the policy (a request's model overrides it): context window and tokenizer")
	f.IntVar(&o.budgetTokens, "budget-tokens", 0, "context window override, in tokens (0: the model's)")
	f.IntVar(&o.reserveOutput, "reserve-output", def.ReserveOutputTokens, "tokens kept free for the reply")
	f.StringVar(&o.trigger, "trigger", def.Trigger.String(), `compaction trigger: a fraction, "60000 tokens" or "200 messages"`)
	f.StringVar(&o.target, "target", def.Target.String(), "what compaction brings the window down to")
	f.StringVar(&o.strategy, "strategy", "", "compaction strategy: mask, archive or observe (default: observe with a summarizer, else mask)")
	f.StringVar(&o.policyJSON, "policy", "", `the whole default policy as JSON, e.g. {"min_tail_turns":3}; applied after the flags above`)

	f.StringVar(&o.summarizerURL, "summarizer-url", "", "base URL of the summarizer's API (default: the OpenAI upstream)")
	f.StringVar(&o.summarizerAPI, "summarizer-api", "openai", "the summarizer's API: openai or anthropic")
	f.StringVar(&o.summarizerModel, "summarizer-model", "", "model that writes observations (empty: deterministic, no model)")
	f.StringVar(&o.summarizerKey, "summarizer-key", "", "the summarizer's API key (default: --openai-key)")
	f.DurationVar(&o.summarizerWait, "summarizer-timeout", 60*time.Second, "how long a summarizer call may take before the deterministic fallback runs; leases on a thread's compaction last twice that plus 10 s")
	f.BoolVar(&o.buffer, "buffer", true, "compute observations in the background before the trigger (with a summarizer model)")

	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "how long a shutdown waits for requests in flight")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json (one JSON object a line)")
	f.BoolVar(&o.demo, "demo", false, "run a scripted tool-heavy agent session through the server against a built-in fake model, then keep serving")
	f.IntVar(&o.demoTurns, "demo-turns", 80, "agent steps the demo runs")

	f.VisitAll(func(fl *pflag.Flag) {
		env := envName(fl.Name)
		if alias := envAliases[fl.Name]; alias != "" {
			env += " or " + alias
		}
		fl.Usage += " (env " + env + ")"
	})
	return c
}

// applyEnvAndFile fills every flag not given on the command line from its
// environment variable, then from the config file.
func applyEnvAndFile(fs *pflag.FlagSet) error {
	cfgPath, _ := fs.GetString("config")
	if !fs.Changed("config") {
		cfgPath = os.Getenv(envName("config"))
	}
	file := map[string]json.RawMessage{}
	if cfgPath != "" {
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if err := json.Unmarshal(b, &file); err != nil {
			return fmt.Errorf("config %s: %w", cfgPath, err)
		}
		for k, v := range file { // accept snake_case keys too
			file[strings.ReplaceAll(k, "_", "-")] = v
		}
	}
	var errs []error
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed || fl.Name == "config" {
			return
		}
		v, ok := os.LookupEnv(envName(fl.Name))
		if !ok && envAliases[fl.Name] != "" {
			v, ok = os.LookupEnv(envAliases[fl.Name])
		}
		if !ok {
			raw, inFile := file[fl.Name]
			if !inFile {
				return
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				s = string(bytes.TrimSpace(raw)) // a number or a boolean
				if fl.Name == "policy" {
					s = string(raw)
				}
			}
			v, ok = s, true
		}
		if err := fl.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fl.Name, err))
		}
	})
	known := map[string]bool{}
	fs.VisitAll(func(fl *pflag.Flag) { known[fl.Name] = true })
	for k := range file {
		if !known[k] && !known[strings.ReplaceAll(k, "_", "-")] {
			errs = append(errs, fmt.Errorf("config %s: unknown key %q", cfgPath, k))
		}
	}
	return errors.Join(errs...)
}

// policy builds the server's default policy from the options.
func (o serveOptions) policy() (mneme.Policy, error) {
	p := mneme.DefaultPolicy()
	p.Model = o.model
	p.BudgetTokens = o.budgetTokens
	p.ReserveOutputTokens = o.reserveOutput
	var err error
	if p.Trigger, err = window.ParseThreshold(o.trigger); err != nil {
		return p, fmt.Errorf("--trigger: %w", err)
	}
	if p.Target, err = window.ParseThreshold(o.target); err != nil {
		return p, fmt.Errorf("--target: %w", err)
	}
	switch {
	case o.strategy != "":
		p.Strategy = window.Strategy(o.strategy)
	case o.summarizerModel != "":
		p.Strategy = window.Observe
	}
	if o.policyJSON != "" {
		if p, err = p.MergeJSON([]byte(o.policyJSON)); err != nil {
			return p, fmt.Errorf("--policy: %w", err)
		}
	}
	return p, p.Validate()
}

// keys reads the auth settings: nil when there is no auth.
func (o serveOptions) keys() (map[string]string, error) {
	keys := map[string]string{}
	if o.authFile != "" {
		f, err := os.Open(o.authFile)
		if err != nil {
			return nil, fmt.Errorf("--auth: %w", err)
		}
		defer f.Close()
		if keys, err = server.ParseKeyFile(f); err != nil {
			return nil, err
		}
	}
	if o.authKeys != "" {
		more, err := server.ParseKeyList(o.authKeys)
		if err != nil {
			return nil, err
		}
		for k, t := range more {
			keys[k] = t
		}
	}
	if len(keys) == 0 {
		if o.authFile != "" {
			return nil, fmt.Errorf("--auth %s: no keys", o.authFile)
		}
		return nil, nil
	}
	return keys, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

func runServe(ctx context.Context, stdout, stderr io.Writer, o serveOptions) error {
	level, err := parseLevel(o.logLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if o.demo && o.logLevel == "info" {
		level = slog.LevelWarn // the demo prints its own lines
	}
	lh, err := logHandler(stderr, o.logFormat, level)
	if err != nil {
		return err
	}
	logger := slog.New(lh)

	var llm *fakellm.Server
	demo := newDemoScript(o.demoTurns)
	if o.demo {
		llm = fakellm.Start(fakellm.WithHandler(demo.reply))
		defer llm.Close()
		o.openaiUpstream, o.anthropicUpstream = llm.URL(), llm.URL()
		if o.budgetTokens == 0 {
			o.budgetTokens = 32000
			o.reserveOutput = 2000
		}
	}
	pol, err := o.policy()
	if err != nil {
		return err
	}
	keys, err := o.keys()
	if err != nil {
		return err
	}
	if err := server.CheckAddr(o.addr, keys != nil, o.insecure); err != nil {
		return err
	}
	retain, err := parseRetain(o.retain)
	if err != nil {
		return err
	}
	sum := compact.LLMConfig{Model: o.summarizerModel, API: o.summarizerAPI, URL: o.summarizerURL, APIKey: o.summarizerKey, Timeout: o.summarizerWait}
	if sum.Model != "" {
		if sum.URL == "" {
			sum.URL = o.openaiUpstream
		}
		if sum.APIKey == "" && o.openaiKey != "" && sum.API != "anthropic" {
			sum.APIKey = o.openaiKey
		}
	}
	proxyCache, memoBytes := o.cacheBytes()
	st, err := dsn.Open(ctx, o.store)
	if err != nil {
		return err
	}
	defer st.Close()
	srv, err := server.New(ctx, server.Config{
		Addr: o.addr, Keys: keys, Insecure: o.insecure, Store: st,
		Engine: mneme.Config{Policy: &pol, Summarizer: sum, Buffer: o.buffer, RequestMemoBytes: memoBytes},
		Proxy: proxy.Config{
			CacheBytes:     proxyCache,
			OpenAIUpstream: o.openaiUpstream, AnthropicUpstream: o.anthropicUpstream,
			OpenAIKey: o.openaiKey, AnthropicKey: o.anthropicKey,
			MaxBodyBytes:    int64(o.maxBodyMiB) << 20,
			RecallRounds:    o.recallRounds,
			UpstreamTimeout: o.upstreamTimeout,
		},
		ShutdownTimeout: o.shutdownTimeout, TenantConcurrency: o.tenantConcurrency, Logger: logger,
		MaxConns: o.maxConns, HeaderTimeout: o.headerTimeout, BodyTimeout: o.bodyTimeout, IdleTimeout: o.idleTimeout,
	})
	if err != nil {
		return err
	}
	defer srv.Close()                                         // before st.Close: the engine's jobs end first
	defer startRetention(ctx, srv.Engine(), retain, logger)() // stopped before srv.Close
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.addr, err)
	}
	base := "http://" + ln.Addr().String()
	auth := "off (tenant default)"
	if keys != nil {
		auth = fmt.Sprintf("%d keys", len(keys))
	}
	logger.Info("mneme serve", "addr", base, "store", o.store, "openai_upstream", o.openaiUpstream, "anthropic_upstream", o.anthropicUpstream, "auth", auth)

	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(serveCtx, ln) }()
	if o.demo {
		fmt.Fprintf(stdout, "mneme serve --demo: proxy on %s, store %s, fake model upstream, context window %d tokens\n\n", base, o.store, pol.BudgetTokens)
		if err := demo.run(ctx, stdout, base, pol.BudgetTokens); err != nil && ctx.Err() == nil {
			stop()
			<-errc
			return fmt.Errorf("demo: %w", err)
		}
		fmt.Fprintf(stdout, "\nStill serving on %s (Ctrl-C to stop). Try:\n", base)
		fmt.Fprintf(stdout, "  open %s/ in a browser: the inspector shows the thread, its compactions and the window chart\n", base)
		fmt.Fprintf(stdout, "  curl -s %s/v1/chat/completions -H 'X-Mneme-Thread: %s' -d '{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}'\n", base, "try-me")
		if !strings.HasPrefix(o.store, "memory:") && o.demoTurns > 0 {
			fmt.Fprintf(stdout, "  mneme export --store %s %s | head\n", o.store, demo.thread)
		}
	} else {
		fmt.Fprintf(stderr, "mneme serve: listening on %s (OpenAI base URL %s/v1, Anthropic base URL %s)\n", base, base, base)
	}
	return <-errc
}

// demoScript is the demo's agent and its model: a scripted, tool-heavy
// coding session. The fake model answers each request with the next step
// of the script (a tool call, or a short text at the end of a turn); the
// agent runs the "tool" and resends its whole history, as agents do.
type demoScript struct {
	turns  int
	thread string

	mu   sync.Mutex
	step int
	done bool // the script is over: the model gives default answers
}

func newDemoScript(turns int) *demoScript {
	return &demoScript{turns: turns, thread: "demo-" + time.Now().UTC().Format("20060102-150405")}
}

// reply is the fake model: summarization requests get the default
// extractive summary; the others the script's next step.
func (d *demoScript) reply(r fakellm.Request) fakellm.Reply {
	d.mu.Lock()
	i, done := d.step, d.done
	d.mu.Unlock()
	if r.IsSummarization() {
		return fakellm.DefaultReply(r)
	}
	if done || i >= d.turns {
		// After the script: a model that uses the first tool it is offered
		// when a user asks something, and answers by default otherwise.
		if tool := firstClientTool(r.Tools); tool != "" && lastIsUserText(r.Messages) {
			args, _ := json.Marshal(map[string]string{"query": r.LastUserText})
			return fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: tool, Arguments: string(args)}}}
		}
		return fakellm.DefaultReply(r)
	}
	if i%10 == 9 {
		return fakellm.Reply{Text: fmt.Sprintf("Step %d done: the failing case narrows to the rounding in total(); continuing.", i)}
	}
	tool, args, _ := demoTool(i)
	return fakellm.Reply{Text: fmt.Sprintf("Step %d: %s.", i, tool), ToolCalls: []fakellm.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: tool, Arguments: args}}}
}

func firstClientTool(tools []string) string {
	for _, t := range tools {
		if !proxy.IsRecallTool(t) {
			return t
		}
	}
	return ""
}

// lastIsUserText reports whether the conversation ends with a user's words
// rather than with tool results.
func lastIsUserText(msgs []map[string]any) bool {
	if len(msgs) == 0 {
		return false
	}
	last := msgs[len(msgs)-1]
	if last["role"] != "user" {
		return false
	}
	blocks, _ := last["content"].([]any)
	for _, b := range blocks {
		if bm, _ := b.(map[string]any); bm["type"] == "tool_result" {
			return false
		}
	}
	return true
}

// demoTool returns step i's tool call and what the tool returns.
func demoTool(i int) (tool, args, body string) {
	var b strings.Builder
	switch i % 3 {
	case 0:
		tool, args = "read_file", fmt.Sprintf(`{"path":"src/shop/file_%d.go"}`, i)
		for l := 0; l < 120; l++ {
			fmt.Fprintf(&b, "func handler%d_%d(w http.ResponseWriter, r *http.Request) { serve(w, r, %d) }\n", i, l, l)
		}
	case 1:
		tool, args = "grep", fmt.Sprintf(`{"pattern":"Checkout%d"}`, i)
		for l := 0; l < 30; l++ {
			fmt.Fprintf(&b, "src/shop/checkout_%d.go:%d: order.Checkout%d(ctx, cart)\n", l, l*7, i)
		}
	default:
		tool, args = "run_tests", `{"pkg":"./src/shop/..."}`
		fmt.Fprintf(&b, "--- FAIL: TestCheckout (0.%02ds)\n    checkout_test.go:%d: total = %d, want 4401\n", i%100, 40+i, 4400+i%3)
	}
	return tool, args, b.String()
}

// run drives the session through the proxy over HTTP, printing the window
// against the budget after every call.
func (d *demoScript) run(ctx context.Context, out io.Writer, base string, budget int) error {
	if d.turns <= 0 {
		d.mu.Lock()
		d.done = true
		d.mu.Unlock()
		fmt.Fprintln(out, "no scripted session (--demo-turns 0): the fake model answers your requests.")
		return nil
	}
	type msg = map[string]any
	history := []msg{
		{"role": "system", "content": "You are a coding agent working in a Go repository. Tools: read_file, grep, run_tests."},
		{"role": "user", "content": "Fix the flaky test TestCheckout (ticket INV-4401) in src/shop/checkout.go; keep the API stable."},
	}
	client := &http.Client{Timeout: time.Minute}
	for i := 0; i < d.turns; i++ {
		d.mu.Lock()
		d.step = i
		d.mu.Unlock()
		body, _ := json.Marshal(msg{"model": "gpt-4o-mini", "messages": history})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(proxy.HeaderThread, d.thread)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		rb, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("call %d: %s: %s", i+1, resp.Status, rb)
		}
		var cc struct {
			Choices []struct {
				Message msg `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(rb, &cc); err != nil || len(cc.Choices) == 0 {
			return fmt.Errorf("call %d: unreadable reply %s", i+1, rb)
		}
		window, _ := strconv.Atoi(resp.Header.Get(proxy.HeaderWindow))
		threadTok, _ := strconv.Atoi(resp.Header.Get(proxy.HeaderThreadTok))
		if b, _ := strconv.Atoi(resp.Header.Get(proxy.HeaderBudget)); b > 0 {
			budget = b
		}
		bar := strings.Repeat("█", min(40, window*40/max(budget, 1)))
		mark := ""
		if resp.Header.Get(proxy.HeaderCompacted) == "true" {
			mark = "  ← compacted"
		}
		fmt.Fprintf(out, "call %3d  window %6d / %d  thread %7d  %-40s%s\n", i+1, window, budget, threadTok, bar, mark)

		reply := cc.Choices[0].Message
		delete(reply, "refusal")
		delete(reply, "annotations")
		history = append(history, reply)
		calls, _ := reply["tool_calls"].([]any)
		for _, c := range calls {
			cm, _ := c.(map[string]any)
			_, _, result := demoTool(i)
			history = append(history, msg{"role": "tool", "tool_call_id": cm["id"], "content": result})
		}
		if len(calls) == 0 {
			history = append(history, msg{"role": "user", "content": fmt.Sprintf("Good. Next, check the callers of Checkout%d.", i)})
		}
	}
	d.mu.Lock()
	d.done = true
	d.mu.Unlock()
	fmt.Fprintf(out, "\nthread %s: the agent resent its whole history (%d messages at the end) on every call; the model saw only the window, and the log holds each message once.\n", d.thread, len(history))
	return nil
}

// cacheBytes splits --cache-mib between the proxy's caches (two thirds)
// and the engine's memo of requests (a third); 0 or less turns both off.
func (o serveOptions) cacheBytes() (proxyCache int64, memo int) {
	if o.cacheMiB <= 0 {
		return -1, -1
	}
	n := int64(o.cacheMiB) << 20
	return n - n/3, int(n / 3)
}
