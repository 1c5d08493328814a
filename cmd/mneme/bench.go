package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme/eval"
	"github.com/mnemehq/mneme/window"
)

func init() { extraCommands = append(extraCommands, benchCmd) }

func benchCmd() *cobra.Command {
	var cfg eval.BenchConfig
	var jsonFile, chartFile, strategies, locomoDir, budget, policy string
	var quiet bool
	c := &cobra.Command{
		Use:   "bench",
		Short: "Compare Mneme's strategies with the usual baselines on a generated long session",
		Long: `Generate a long agent session (seeded: the same flags give the same session)
in one of the profiles — coding (file reads, greps, test runs, edits),
observability (large span dumps), support (user facts, preferences, changes of
mind), research (web pages) — with facts planted along it (ids, numbers,
decisions, preferences, some superseded later), and replay it against:

  full-history   the whole history every call (no management)
  last-n         the system prompt and the last N messages
  token-trim     LangChain trim_messages(strategy=last, max_tokens=budget, start_on=human)
  summarize-90   summarize everything but the last messages at 90% of the budget
  mneme-mask, mneme-archive, mneme-observe (extractive summarizer),
  mneme-observe-llm (a scripted model as summarizer)

For each: tokens sent over the session (cost) and their ratio to the full
history's, peak and final window, compression, calls over the budget, fact
availability (a fact counts when its latest value is in the last window or
in the top 3 archive search hits for its probe; baselines have no archive),
superseded-fact errors, tool-pair violations, prefix-stable calls (the share
a provider's prompt cache can reuse whole) and time per window.

With --locomo DIR, real conversations instead (LoCoMo, Maharana et al., ACL
2024): each is replayed turn by turn, then each question (categories 1–4) is
asked as the next user turn on a branch that is never kept, and the window
the model would see is checked for the question's evidence turns, beside
last-n and a plain FTS5 BM25 search at the same budget (--budget, comma-
separated, default 8192,16384; --strategies picks Mneme's strategies).

The default pretend model is gpt-4o's tokenizer with a 32,000-token window
(4,096 reserved for output), small enough that 300 turns overflow it many
times: the comparison is about managing overflow, not avoiding it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if locomoDir != "" {
				return runLoCoMo(cmd, eval.LoCoMoConfig{Dir: locomoDir, Policy: policy}, budget, strategies, jsonFile, quiet)
			}
			if budget != "" {
				n, err := strconv.Atoi(budget)
				if err != nil || n <= 0 {
					return fmt.Errorf("--budget %q: want one token count", budget)
				}
				cfg.BudgetTokens = n
			}
			if strategies != "" {
				cfg.Strategies = strings.Split(strategies, ",")
			}
			if !quiet {
				cfg.Progress = cmd.ErrOrStderr()
			}
			rep, err := eval.Bench(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			eval.WriteBenchTable(out, rep)
			if jsonFile != "" {
				b, err := json.MarshalIndent(rep.Records, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(jsonFile, append(b, '\n'), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(out, "\nreport: %s\n", jsonFile)
			}
			if chartFile != "" {
				f, err := os.Create(chartFile)
				if err != nil {
					return err
				}
				if err := eval.WriteChartSVG(f, rep); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				fmt.Fprintf(out, "chart: %s\n", chartFile)
			}
			for _, r := range rep.Records {
				if r.Error != "" {
					return exitError{1}
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Profile, "profile", eval.ProfileCoding, "session profile: "+strings.Join(eval.Profiles, ", "))
	f.IntVar(&cfg.Turns, "turns", 300, "model calls in the session")
	f.Uint64Var(&cfg.Seed, "seed", 1, "generator seed")
	f.StringVar(&cfg.Model, "model", "gpt-4o", "pretend model (its tokenizer counts)")
	f.StringVar(&budget, "budget", "", "the pretend model's context window, in tokens (default 32000; with --locomo, comma-separated, default 8192,16384)")
	f.IntVar(&cfg.ReserveOutputTokens, "reserve-output", 4096, "tokens kept for the reply")
	f.IntVar(&cfg.LastN, "last-n", 40, "messages the last-n baseline keeps")
	f.IntVar(&cfg.TopK, "top-k", 3, "archive hits a probe reads")
	f.StringVar(&strategies, "strategies", "", "comma-separated strategies to run (default all): "+strings.Join(eval.Strategies, ","))
	f.StringVar(&jsonFile, "json", "", "write the report (one record per strategy) to this JSON file")
	f.StringVar(&chartFile, "chart", "", "write an SVG chart of window tokens per call to this file")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	f.StringVar(&policy, "policy", "", `with --locomo: JSON merged over Mneme's default policy (e.g. '{"recall_top_k":24}')`)
	f.StringVar(&locomoDir, "locomo", "", "run the LoCoMo bench on the conversations of this folder instead (see --budget)")
	return c
}

// runLoCoMo is `mneme bench --locomo DIR`.
func runLoCoMo(cmd *cobra.Command, cfg eval.LoCoMoConfig, b, strategies, jsonFile string, quiet bool) error {
	if b != "" {
		for _, p := range strings.Split(b, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || n <= 0 {
				return fmt.Errorf("--budget %q: want token counts separated by commas", b)
			}
			cfg.Budgets = append(cfg.Budgets, n)
		}
	}
	if strategies != "" {
		for _, s := range strings.Split(strategies, ",") {
			st := window.Strategy(strings.TrimPrefix(strings.TrimSpace(s), "mneme-"))
			switch st {
			case window.Mask, window.Archive, window.Observe:
			default:
				return fmt.Errorf("--strategies %q: with --locomo, mask, archive or observe", s)
			}
			cfg.Strategies = append(cfg.Strategies, st)
		}
	}
	if !quiet {
		cfg.Progress = cmd.ErrOrStderr()
	}
	rep, err := eval.LoCoMoBench(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	eval.WriteLoCoMoTable(out, rep)
	if jsonFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonFile, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nreport: %s\n", jsonFile)
	}
	return nil
}
