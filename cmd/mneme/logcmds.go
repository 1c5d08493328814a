package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

// storeFlags are the flags every command that opens a store takes.
type storeFlags struct {
	dsn    string
	tenant string
}

func (f *storeFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.dsn, "store", envOr("MNEME_STORE", mneme.DefaultDSN), "store DSN: sqlite:PATH, memory: or postgres://... (env MNEME_STORE)")
	c.Flags().StringVar(&f.tenant, "tenant", envOr("MNEME_TENANT", "default"), "tenant the threads belong to (env MNEME_TENANT)")
}

func (f *storeFlags) open(ctx context.Context) (store.Store, error) {
	return dsn.Open(ctx, f.dsn)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func threadsCmd() *cobra.Command {
	var f storeFlags
	var limit int
	c := &cobra.Command{
		Use:   "threads",
		Short: "List a tenant's threads: id, messages, tokens, last activity",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "THREAD\tMESSAGES\tTOKENS\tEVENTS\tLAST ACTIVITY")
			cursor, shown := "", 0
			for {
				infos, next, err := st.Threads(cmd.Context(), f.tenant, store.Page{Cursor: cursor, Limit: 100})
				if err != nil {
					return err
				}
				for _, ti := range infos {
					if limit > 0 && shown >= limit {
						return w.Flush()
					}
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\n", ti.ID, ti.Messages, ti.Tokens, ti.Events, ti.Updated.Local().Format(time.DateTime))
					shown++
				}
				if next == "" {
					break
				}
				cursor = next
			}
			return w.Flush()
		},
	}
	f.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "show at most this many threads (0: all)")
	return c
}

func exportCmd() *cobra.Command {
	var f storeFlags
	c := &cobra.Command{
		Use:   "export THREAD",
		Short: "Print a thread's whole log as JSONL, one event per line",
		Long: `Print a thread's whole log as JSONL: one event per line with seq, kind, at,
ref and tokens; message events carry the message in OpenAI chat shape under
"message" (or "messages" when it maps to several) and losslessly under
"mneme"; other events carry their payload under "data". Nothing is left out:
compaction never deletes the log.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			if _, err := st.Thread(cmd.Context(), f.tenant, args[0]); err != nil {
				return fmt.Errorf("thread %q of tenant %q: %w", args[0], f.tenant, err)
			}
			_, err = mneme.WriteExport(cmd.Context(), st, f.tenant, args[0], cmd.OutOrStdout())
			return err
		},
	}
	f.add(c)
	return c
}

func importCmd() *cobra.Command {
	var f storeFlags
	var keepRefs bool
	c := &cobra.Command{
		Use:   "import THREAD < FILE",
		Short: "Read a JSONL log (as `mneme export` writes it) into a new thread",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			evs, err := mneme.ReadExport(cmd.InOrStdin(), keepRefs)
			if err != nil {
				return err
			}
			st, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			if last, err := st.LastSeq(cmd.Context(), f.tenant, args[0]); err != nil {
				return err
			} else if last != 0 {
				return fmt.Errorf("thread %q already has %d events: import into a new thread", args[0], last)
			}
			for i := 0; i < len(evs); i += 500 {
				j := min(i+500, len(evs))
				if _, err := st.Append(cmd.Context(), f.tenant, args[0], int64(i), evs[i:j]); err != nil {
					return fmt.Errorf("events %d-%d: %w", i+1, j, err)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "imported %d events into %s\n", len(evs), args[0])
			return nil
		},
	}
	f.add(c)
	c.Flags().BoolVar(&keepRefs, "keep-refs", false, "keep the refs of the export (only into another store: refs are unique per tenant)")
	return c
}
