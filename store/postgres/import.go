package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

// Import bulk-loads events into a thread with COPY, for `mneme migrate`:
// evs carry the seqs, times, refs and token counts they had in the source
// and must continue the thread (evs[0].Seq is its last seq + 1, then
// consecutive; Seq 0 means "the next one"). The thread is created if
// needed, with its created time the first event's; its updated time becomes
// the last event's if that is later. It is one transaction, checked like
// Append: ErrConflict if the thread's tail is not where evs start.
func (s *Store) Import(ctx context.Context, tenant, thread string, evs []store.Event) error {
	if err := backend.CheckScope(tenant, thread); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	if evs[0].Seq < 0 {
		return fmt.Errorf("%w: negative seq", store.ErrInvalid)
	}
	after := evs[0].Seq - 1
	if evs[0].Seq == 0 {
		last, err := s.LastSeq(ctx, tenant, thread)
		if err != nil {
			return err
		}
		after = last
	}
	now := s.clock()
	rows := make([]row, len(evs))
	for i, ev := range evs {
		seq := after + int64(i) + 1
		if ev.Seq != 0 && ev.Seq != seq {
			return fmt.Errorf("%w: event %d has seq %d, want %d (seqs must be consecutive)", store.ErrInvalid, i, ev.Seq, seq)
		}
		r, err := encode(ev, seq, now)
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		rows[i] = r
	}
	created, updated := rows[0].ev.At, rows[len(rows)-1].ev.At
	return s.inTx(ctx, "import", func(tx pgx.Tx) error {
		if err := lockTail(ctx, tx, tenant, thread, after, true, created); err != nil {
			return err
		}
		return insertRows(ctx, tx, &s.calls, tenant, thread, after, rows, updated, true)
	})
}

// ImportMemory writes an item as it was in another store: its Created,
// Updated and Expires are kept (zero ones are set to now). An item already
// expired is skipped.
func (s *Store) ImportMemory(ctx context.Context, tenant string, it store.Memory) error {
	if err := backend.CheckItem(tenant, it); err != nil {
		return err
	}
	if it.Value == nil {
		return fmt.Errorf("%w: memory value is empty", store.ErrInvalid)
	}
	now := s.clock()
	if backend.Expired(it.Expires, now) {
		return nil
	}
	if it.Created.IsZero() {
		it.Created = now
	}
	if it.Updated.IsZero() {
		it.Updated = it.Created
	}
	return s.inTx(ctx, "import memory", func(tx pgx.Tx) error {
		var created int64
		if err := upsertMemory(ctx, tx, tenant, it).Scan(&created); err != nil {
			return dbErr("import memory", err)
		}
		return nil
	})
}
