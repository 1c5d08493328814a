package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/api"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/window"
)

func init() { extraCommands = append(extraCommands, inspectCmd) }

func inspectCmd() *cobra.Command {
	var f storeFlags
	var from int64
	var limit int
	c := &cobra.Command{
		Use:   "inspect THREAD",
		Short: "Show a thread as the window sees it: usage, observations and the timeline",
		Long: `Show a thread in the terminal, as the inspector page does: its usage (thread
and window tokens against budget, trigger and target), the observations in
the memory block with the seq ranges they cover, and the log as a
timeline where each message is marked raw, evicted, masked, observed or
catalogued, and each compaction says what left and what replaced it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			quiet := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
			m, err := mneme.Open(cmd.Context(), mneme.Config{Store: st, Logger: quiet})
			if err != nil {
				return err
			}
			defer m.Close()
			return inspectThread(cmd.Context(), cmd.OutOrStdout(), m, f.tenant, args[0], from, limit)
		},
	}
	f.add(c)
	c.Flags().Int64Var(&from, "from", 1, "first seq of the timeline")
	c.Flags().IntVar(&limit, "limit", 0, "most events in the timeline (0: all)")
	return c
}

// inspectThread writes the thread's usage, observations and timeline.
func inspectThread(ctx context.Context, out io.Writer, m *mneme.Engine, tenant, id string, from int64, limit int) error {
	info, err := m.Store().Thread(ctx, tenant, id)
	if err != nil {
		return fmt.Errorf("thread %q of tenant %q: %w", id, tenant, err)
	}
	a, err := api.New(api.Config{Engine: m})
	if err != nil {
		return err
	}
	u, err := m.Thread(tenant, id).Usage(ctx)
	if err != nil {
		return err
	}
	forms, err := a.Forms(ctx, tenant, id)
	if err != nil {
		return err
	}
	blocks, err := a.Observations(ctx, tenant, id)
	if err != nil {
		return err
	}
	w := u.Window
	fmt.Fprintf(out, "thread %s (tenant %s): %d events, %d messages, %d tokens\n", id, tenant, info.Events, u.Messages, u.Tokens)
	fmt.Fprintf(out, "window %d tokens of %d (%s), trigger %d, target %d: system %d, tools %d, recall %d, head %d, memory %d, tail %d; %d messages, %d compactions\n",
		w.Total, w.Budget, pct(w.Total, w.Budget), w.Trigger, w.Target, w.System, w.Tools, w.Recall, w.Head, w.Memory, w.Tail, w.Messages, w.Compactions)
	counts := map[string]int{}
	for _, f := range forms {
		counts[f]++
	}
	var parts []string
	for _, f := range []string{api.FormRaw, api.FormEvicted, api.FormMasked, api.FormObserved, api.FormCatalogued, api.FormDropped} {
		if counts[f] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", f, counts[f]))
		}
	}
	fmt.Fprintf(out, "messages by form: %s\n", strings.Join(parts, ", "))

	fmt.Fprintf(out, "\nobservations (%d):\n", len(blocks))
	for _, b := range blocks {
		kind := "observation"
		if b.Kind != window.Observe {
			kind = "catalogue"
		}
		fmt.Fprintf(out, "  %s of seq %d-%d (%d tokens, event %d)\n", kind, b.From, b.To, b.Tokens, b.EventSeq)
		for _, l := range strings.Split(strings.TrimSpace(b.Text), "\n") {
			fmt.Fprintf(out, "    %s\n", clip(l, 140))
		}
	}

	fmt.Fprintf(out, "\ntimeline:\n")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tROLE\tFORM\tTOKENS\tCONTENT")
	shown := 0
	for next := max(from, 1); ; {
		evs, err := m.Store().Load(ctx, tenant, id, next, 1000)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if limit > 0 && shown >= limit {
				return tw.Flush()
			}
			shown++
			if ev.Message != nil {
				form := forms[ev.Seq]
				if form == "" {
					form = api.FormRaw
				}
				content := ev.Message.PlainText()
				if tools := toolNames(ev.Message.Parts); tools != "" {
					content = "[" + tools + "] " + content
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", ev.Seq, ev.Message.Role, form, ev.Tokens, clip(content, 100))
				continue
			}
			fmt.Fprintf(tw, "%d\t-\t%s\t\t%s\n", ev.Seq, strings.ToUpper(string(ev.Kind)), clip(eventLine(ev), 120))
		}
		if len(evs) < 1000 {
			break
		}
		next = evs[len(evs)-1].Seq + 1
	}
	return tw.Flush()
}

func pct(n, of int) string {
	if of <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
}

// clip collapses whitespace and cuts s to n runes.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func toolNames(parts []message.Part) string {
	var names []string
	seen := map[string]bool{}
	for _, p := range parts {
		if p.ToolName != "" && !seen[p.ToolName] {
			seen[p.ToolName] = true
			names = append(names, p.ToolName)
		}
	}
	return strings.Join(names, ",")
}

// eventLine says what a non-message event did.
func eventLine(ev store.Event) string {
	switch ev.Kind {
	case store.KindCompacted:
		var d window.CompactedData
		if json.Unmarshal(ev.Data, &d) == nil {
			s := fmt.Sprintf("seq %d-%d left the window (%s): %d -> %d tokens", d.From, d.To, d.Strategy, d.TokensBefore, d.TokensAfter)
			if d.Fallback != "" {
				s += "; fallback: " + d.Fallback
			}
			return s
		}
	case store.KindReflected:
		var d window.ReflectedData
		if json.Unmarshal(ev.Data, &d) == nil {
			return fmt.Sprintf("observations of seq %d-%d condensed: %d -> %d tokens", d.From, d.To, d.TokensBefore, d.TokensAfter)
		}
	case store.KindMasked:
		var d window.MaskedData
		if json.Unmarshal(ev.Data, &d) == nil {
			return fmt.Sprintf("%d tool results masked: %v", len(d.Seqs), d.Seqs)
		}
	}
	return string(ev.Data)
}
