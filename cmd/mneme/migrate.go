package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/dsn"
)

func init() { extraCommands = append(extraCommands, migrateCmd) }

func migrateCmd() *cobra.Command {
	var (
		from, to, tenant string
		all              bool
	)
	c := &cobra.Command{
		Use:   "migrate --from DSN --to DSN [--tenant T | --all-tenants]",
		Short: "Copy threads and memories from one store to another (SQLite ⇄ PostgreSQL)",
		Long: `migrate copies every thread of a tenant (or of every tenant) from one store
to another: events in order with their seqs, refs, times and token counts,
and the tenant's long-term memories. It shows its progress on stderr and
checks at the end that every thread has as many events and messages on both
sides and that every memory arrived; otherwise it exits with status 1.

Run it while nothing writes to the source. It resumes: a thread already
partly copied (the target holds a prefix of it) continues where it stopped;
a target thread that differs from the source is an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return errors.New("migrate needs --from and --to")
			}
			if all && cmd.Flags().Changed("tenant") {
				return errors.New("give --tenant or --all-tenants, not both")
			}
			ctx := cmd.Context()
			src, err := dsn.Open(ctx, from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			defer src.Close()
			dst, err := dsn.Open(ctx, to)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			defer dst.Close()
			tenants := []string{tenant}
			if all {
				tl, ok := store.As[store.TenantLister](src)
				if !ok {
					return fmt.Errorf("the --from store cannot list its tenants: use --tenant")
				}
				if tenants, err = tl.Tenants(ctx); err != nil {
					return err
				}
			}
			rep, err := migrateStores(ctx, src, dst, tenants, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "migrated %d tenants: %d threads, %d events (%d messages), %d memories\n",
				len(tenants), rep.threads, rep.events, rep.messages, rep.memories)
			if len(rep.mismatches) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "count check failed for %d item(s):\n", len(rep.mismatches))
				for _, m := range rep.mismatches {
					fmt.Fprintln(cmd.ErrOrStderr(), "  "+m)
				}
				return exitError{1}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "count check: every thread and memory matches")
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "source store DSN (sqlite:PATH, postgres://...)")
	c.Flags().StringVar(&to, "to", "", "target store DSN")
	c.Flags().StringVar(&tenant, "tenant", envOr("MNEME_TENANT", "default"), "the tenant to copy (env MNEME_TENANT)")
	c.Flags().BoolVar(&all, "all-tenants", false, "copy every tenant of the source")
	return c
}

// importer is what a target can offer for a faithful bulk copy
// (store/postgres: COPY, and memories keep their created and updated
// times). Without it migrate appends, which keeps seqs, refs, times and
// token counts but stamps memories with the time of the copy.
type importer interface {
	Import(ctx context.Context, tenant, thread string, evs []store.Event) error
	ImportMemory(ctx context.Context, tenant string, it store.Memory) error
}

// migrateReport sums up a migration; mismatches lists what the final count
// check found different.
type migrateReport struct {
	threads, events, messages, memories int64
	mismatches                          []string
}

const migrateBatch = 500

// migrateStores copies the tenants' threads and memories from src to dst,
// reporting progress on w, then checks the counts.
func migrateStores(ctx context.Context, src, dst store.Store, tenants []string, w io.Writer) (migrateReport, error) {
	var rep migrateReport
	type work struct {
		tenant  string
		threads []store.ThreadInfo
		items   []store.Memory
	}
	var jobs []work
	bar := &progressBar{w: w}
	for _, tenant := range tenants {
		threads, err := allThreads(ctx, src, tenant)
		if err != nil {
			return rep, fmt.Errorf("tenant %s: %w", tenant, err)
		}
		items, err := allMemories(ctx, src, tenant)
		if err != nil {
			return rep, fmt.Errorf("tenant %s: memories: %w", tenant, err)
		}
		for _, ti := range threads {
			bar.total += ti.Events
		}
		bar.total += int64(len(items))
		jobs = append(jobs, work{tenant, threads, items})
	}
	im, _ := dst.(importer)
	for _, j := range jobs {
		for _, ti := range j.threads {
			if err := copyThread(ctx, src, dst, im, j.tenant, ti.ID, bar); err != nil {
				bar.done()
				return rep, fmt.Errorf("tenant %s thread %s: %w", j.tenant, ti.ID, err)
			}
		}
		for _, it := range j.items {
			it.Score = 0
			var err error
			if im != nil {
				err = im.ImportMemory(ctx, j.tenant, it)
			} else {
				_, err = dst.PutMemory(ctx, j.tenant, it)
			}
			if err != nil {
				bar.done()
				return rep, fmt.Errorf("tenant %s memory %q/%s: %w", j.tenant, it.Namespace, it.Key, err)
			}
			bar.add(1)
		}
	}
	bar.done()

	// The count check, on both sides as they are now.
	for _, j := range jobs {
		for _, ti := range j.threads {
			s, err := src.Thread(ctx, j.tenant, ti.ID)
			if err != nil {
				return rep, err
			}
			d, err := dst.Thread(ctx, j.tenant, ti.ID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return rep, err
			}
			if s.Events != d.Events || s.Messages != d.Messages {
				rep.mismatches = append(rep.mismatches, fmt.Sprintf("tenant %s thread %s: source %d events, %d messages; target %d events, %d messages",
					j.tenant, ti.ID, s.Events, s.Messages, d.Events, d.Messages))
			}
			rep.threads++
			rep.events += d.Events
			rep.messages += d.Messages
		}
		for _, it := range j.items {
			got, err := dst.GetMemory(ctx, j.tenant, it.Namespace, it.Key)
			switch {
			case errors.Is(err, store.ErrNotFound):
				rep.mismatches = append(rep.mismatches, fmt.Sprintf("tenant %s memory %s/%s: missing in the target", j.tenant, strings.Join(it.Namespace, "/"), it.Key))
				continue
			case err != nil:
				return rep, err
			case !sameJSON(got.Value, it.Value):
				rep.mismatches = append(rep.mismatches, fmt.Sprintf("tenant %s memory %s/%s: values differ", j.tenant, strings.Join(it.Namespace, "/"), it.Key))
				continue
			}
			rep.memories++
		}
	}
	return rep, nil
}

// copyThread copies the events of one thread that the target lacks.
func copyThread(ctx context.Context, src, dst store.Store, im importer, tenant, thread string, bar *progressBar) error {
	last, err := dst.LastSeq(ctx, tenant, thread)
	if err != nil {
		return err
	}
	if last > 0 {
		// Resume only onto a prefix of the source: same event at the tail.
		s, err := src.Load(ctx, tenant, thread, last, 1)
		if err != nil {
			return err
		}
		d, err := dst.Load(ctx, tenant, thread, last, 1)
		if err != nil {
			return err
		}
		if len(s) != 1 || len(d) != 1 || s[0].Kind != d[0].Kind || s[0].Ref != d[0].Ref || !s[0].At.Equal(d[0].At) {
			return fmt.Errorf("the target already holds %d events that are not a prefix of the source's", last)
		}
		bar.add(last)
	}
	for from := last + 1; ; {
		evs, err := src.Load(ctx, tenant, thread, from, migrateBatch)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		if im != nil {
			err = im.Import(ctx, tenant, thread, evs)
		} else {
			_, err = dst.Append(ctx, tenant, thread, from-1, evs)
		}
		if err != nil {
			return err
		}
		bar.add(int64(len(evs)))
		from = evs[len(evs)-1].Seq + 1
		if len(evs) < migrateBatch {
			return nil
		}
	}
}

func allThreads(ctx context.Context, st store.Store, tenant string) ([]store.ThreadInfo, error) {
	var out []store.ThreadInfo
	for cursor := ""; ; {
		infos, next, err := st.Threads(ctx, tenant, store.Page{Cursor: cursor, Limit: 500})
		if err != nil {
			return nil, err
		}
		out = append(out, infos...)
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// allMemories lists the tenant's unexpired memories, newest first, by
// offset: migrate runs with the source quiet, so the order holds still.
func allMemories(ctx context.Context, st store.Store, tenant string) ([]store.Memory, error) {
	var out []store.Memory
	for {
		items, err := st.SearchMemory(ctx, tenant, store.MemoryQuery{Limit: 200, Offset: len(out)})
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return out, nil
		}
		out = append(out, items...)
	}
}

func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// progressBar draws one self-overwriting line: a bar, the percentage and
// the counts, at most ten times a second.
type progressBar struct {
	w        io.Writer
	total, n int64
	last     time.Time
	over     bool
}

func (p *progressBar) add(n int64) {
	p.n += n
	if time.Since(p.last) >= 100*time.Millisecond || p.n == p.total {
		p.draw()
	}
}

func (p *progressBar) draw() {
	p.last = time.Now()
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(p.n) / float64(p.total)
	}
	const width = 30
	fill := min(width, int(pct*width/100))
	fmt.Fprintf(p.w, "\r[%s%s] %5.1f%%  %d/%d events and memories", strings.Repeat("#", fill), strings.Repeat(".", width-fill), pct, p.n, p.total)
}

// done draws the final state and ends the line.
func (p *progressBar) done() {
	if p.over {
		return
	}
	p.over = true
	p.draw()
	fmt.Fprintln(p.w)
}
