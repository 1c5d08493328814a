package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
)

func demoCmd() *cobra.Command {
	var f storeFlags
	var turns int
	var budget int
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run a scripted tool-heavy agent session through the library and watch the window",
		Long: `Run a scripted, tool-heavy agent session (file reads, greps, test runs) through
Mneme's library on the given store and print, for every model call, the
window's size against the budget: it rises, and falls at each compaction,
while the thread's log keeps everything. No model and no API key needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			p := mneme.DefaultPolicy()
			p.BudgetTokens = budget
			p.ReserveOutputTokens = budget / 16
			m, err := mneme.Open(ctx, mneme.Config{DSN: f.dsn, Policy: &p})
			if err != nil {
				return err
			}
			defer m.Close()
			id := fmt.Sprintf("demo-%d", turns)
			t := m.Thread(f.tenant, id)
			if err := t.Delete(ctx); err != nil && !isNotFound(err) {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "thread %s on %s, budget %d tokens\n", id, f.dsn, budget)
			if _, err := t.Append(ctx, message.NewText(message.System, "You are a coding agent working in a Go repository."),
				message.NewText(message.User, "Fix the flaky test TestCheckout (ticket INV-4401) in src/shop/checkout.go; keep the API stable.")); err != nil {
				return err
			}
			for i := 1; i <= turns; i++ {
				id := fmt.Sprintf("call_%d", i)
				tool, args, body := demoStep(i)
				msgs := []message.Message{
					message.NewToolCalls(fmt.Sprintf("Step %d: %s.", i, tool), message.Part{ToolCallID: id, ToolName: tool, Arguments: args}),
					message.NewToolResult(id, body),
				}
				_, w, err := t.AppendWindow(ctx, msgs, mneme.WindowOptions{})
				if err != nil {
					return err
				}
				u := w.Usage
				bar := strings.Repeat("█", u.Total*40/u.Budget)
				mark := ""
				if u.Compacted != nil {
					mark = fmt.Sprintf("  ← compacted seq %d–%d (%s)", u.Compacted.From, u.Compacted.To, u.Compacted.Strategy)
				}
				fmt.Fprintf(out, "call %3d  window %6d / %d  thread %7d  %-40s%s\n", i, u.Total, u.Budget, u.ThreadTokens, bar, mark)
			}
			fmt.Fprintf(out, "\nthe log keeps every message: mneme export --store %s %s\n", f.dsn, id)
			return nil
		},
	}
	f.add(c)
	c.Flags().IntVar(&turns, "turns", 60, "agent steps to run")
	c.Flags().IntVar(&budget, "budget", 32000, "context window of the pretend model, in tokens")
	return c
}

func demoStep(i int) (tool, args, body string) {
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
