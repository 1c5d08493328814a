package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
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

// exportLine is one line of `mneme export`: an event, with a message event's
// message in OpenAI chat shape (`message`, or `messages` when one logged
// message maps to several OpenAI messages) and, for a lossless import, in
// Mneme's own shape (`mneme`).
type exportLine struct {
	Seq      int64             `json:"seq"`
	Kind     store.Kind        `json:"kind"`
	At       time.Time         `json:"at"`
	Ref      string            `json:"ref,omitempty"`
	Tokens   int               `json:"tokens,omitempty"`
	Message  json.RawMessage   `json:"message,omitempty"`
	Messages []json.RawMessage `json:"messages,omitempty"`
	Mneme    *message.Message  `json:"mneme,omitempty"`
	Data     json.RawMessage   `json:"data,omitempty"`
}

// ExportEvent renders one event as an export line.
func exportEvent(ev store.Event) (exportLine, error) {
	l := exportLine{Seq: ev.Seq, Kind: ev.Kind, At: ev.At, Ref: ev.Ref, Tokens: ev.Tokens, Data: ev.Data}
	if ev.Message != nil {
		oa, err := message.EncodeOpenAI(*ev.Message)
		if err != nil {
			return l, fmt.Errorf("seq %d: %w", ev.Seq, err)
		}
		if len(oa) == 1 {
			l.Message = oa[0]
		} else {
			l.Messages = oa
		}
		l.Mneme = ev.Message
	}
	return l, nil
}

func writeExport(ctx context.Context, st store.Store, tenant, thread string, out io.Writer) (int, error) {
	bw := bufio.NewWriter(out)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	for from := int64(1); ; {
		evs, err := st.Load(ctx, tenant, thread, from, 1000)
		if err != nil {
			return n, err
		}
		for _, ev := range evs {
			l, err := exportEvent(ev)
			if err != nil {
				return n, err
			}
			if err := enc.Encode(l); err != nil {
				return n, err
			}
			n++
		}
		if len(evs) < 1000 {
			break
		}
		from = evs[len(evs)-1].Seq + 1
	}
	return n, bw.Flush()
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
			_, err = writeExport(cmd.Context(), st, f.tenant, args[0], cmd.OutOrStdout())
			return err
		},
	}
	f.add(c)
	return c
}

// readImport parses export lines back into events (seqs renumbered from 1,
// fresh refs unless keepRefs).
func readImport(in io.Reader, keepRefs bool) ([]store.Event, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	var evs []store.Event
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l exportLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if !l.Kind.Valid() {
			return nil, fmt.Errorf("line %d: unknown kind %q", line, l.Kind)
		}
		if l.Seq != int64(len(evs)+1) {
			return nil, fmt.Errorf("line %d: seq %d, want %d (the log must be gapless)", line, l.Seq, len(evs)+1)
		}
		ev := store.Event{Kind: l.Kind, At: l.At, Tokens: l.Tokens, Data: l.Data}
		if keepRefs {
			ev.Ref = l.Ref
		}
		if l.Kind == store.KindMessage {
			switch {
			case l.Mneme != nil:
				ev.Message = l.Mneme
			case len(l.Message) > 0:
				m, err := message.DecodeOpenAI(l.Message)
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", line, err)
				}
				ev.Message = &m
			default:
				return nil, fmt.Errorf("line %d: message event without a message", line)
			}
		}
		evs = append(evs, ev)
	}
	return evs, sc.Err()
}

func importCmd() *cobra.Command {
	var f storeFlags
	var keepRefs bool
	c := &cobra.Command{
		Use:   "import THREAD < FILE",
		Short: "Read a JSONL log (as `mneme export` writes it) into a new thread",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			evs, err := readImport(cmd.InOrStdin(), keepRefs)
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

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
