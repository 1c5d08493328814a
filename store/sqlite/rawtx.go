package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	sqlitedrv "modernc.org/sqlite"

	"github.com/mnemehq/mneme/store"
)

// A group commit runs on the writer's driver connection directly, not in a
// database/sql transaction: BEGIN and COMMIT are statements prepared once
// like the group's others, where database/sql's Tx had the driver parse
// both at every commit, started a goroutine to watch its context and
// rebound every statement to it: a seventh of a lone writer's CPU.

// rawConn is the writer's driver connection as a group commit uses it,
// with the statements prepared on it.
type rawConn struct {
	conn  any // the driver connection the statements belong to
	stmts map[string]driver.Stmt
}

// rawTx runs statements on the writer's driver connection, each prepared
// once: what a group's transaction runs on.
type rawTx struct {
	c *rawConn
}

// execer is where the archive index's queue moves: a database/sql
// transaction, or a group commit's rawTx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var _ execer = (*sql.Tx)(nil)
var _ execer = rawTx{}

// stmt returns query prepared on the connection, preparing it on first use.
func (x rawTx) stmt(ctx context.Context, query string) (driver.Stmt, error) {
	if st, ok := x.c.stmts[query]; ok {
		return st, nil
	}
	st, err := x.c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	x.c.stmts[query] = st
	return st, nil
}

// ExecContext runs query with args, as sql.Tx's does.
func (x rawTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := x.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return st.(driver.StmtExecContext).ExecContext(ctx, nv)
}

// queryInt64 returns the first column of query's first row, and false
// when it has none.
func (x rawTx) queryInt64(ctx context.Context, query string, args ...any) (int64, bool, error) {
	st, err := x.stmt(ctx, query)
	if err != nil {
		return 0, false, err
	}
	nv, err := namedValues(args)
	if err != nil {
		return 0, false, err
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(ctx, nv)
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); errors.Is(err, io.EOF) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	v, ok := dest[0].(int64)
	if !ok {
		return 0, false, fmt.Errorf("sqlite: %T where an integer was expected", dest[0])
	}
	return v, true, nil
}

// namedValues converts args as database/sql does for a driver without a
// converter of its own: driver.Valuers (sql.NullString) give their value,
// and the default converter the rest (int to int64).
func namedValues(args []any) ([]driver.NamedValue, error) {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		if v, ok := a.(driver.Valuer); ok {
			var err error
			if a, err = v.Value(); err != nil {
				return nil, err
			}
		}
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			return nil, fmt.Errorf("sqlite: argument %d: %w", i+1, err)
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv, nil
}

// rawWriteTx runs fn in an IMMEDIATE transaction on the writer's driver
// connection, and, like writeTx, reports the commit as failed when the
// database file is gone or replaced (checkFile).
func (s *Store) rawWriteTx(ctx context.Context, fn func(x rawTx) error) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return classify("begin", err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		if s.raw.conn != dc {
			// A new connection (database/sql replaced a broken one): the
			// statements prepared on the old one went with it.
			s.raw = rawConn{conn: dc, stmts: map[string]driver.Stmt{}}
		}
		x := rawTx{c: &s.raw}
		if _, err := x.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			return classify("begin", err)
		}
		if err := fn(x); err != nil {
			x.ExecContext(ctx, `ROLLBACK`)
			var se *sqlitedrv.Error
			if errors.As(err, &se) && !errors.Is(err, store.ErrUnavailable) {
				return classify("write", err)
			}
			return err
		}
		done := s.commitAwake()
		_, err := x.ExecContext(ctx, `COMMIT`)
		fileErr := done()
		if err != nil {
			// A failed COMMIT can leave the transaction open (busy): it
			// must not stay open on the writer.
			x.ExecContext(ctx, `ROLLBACK`)
			return classify("commit", err)
		}
		s.committed()
		return fileErr
	})
	return err
}

// commitAwake starts a goroutine that checks the database file
// (checkFile) and then waits for the returned func, which returns the
// check's outcome; a COMMIT, whose fsync blocks the writer's thread, runs
// in between. The check, a stat, is made while the commit writes rather
// than after it: it was 4% of a lone writer's time (13 µs a commit,
// BenchmarkDurableAppend/sqlite/1 profiled), and a file removed or
// replaced before the commit is found either way, while one replaced as
// the commit ends was not found before either (it could be, just after the
// check).
//
// The goroutine staying until the commit returns is older than the
// check. Measured on the shared 2-core VM at load 5.6-7.4
// (BenchmarkDurableAppend/sqlite/1, rounds of 5,000 interleaved with and
// without it), a lone writer's durable appends ran at 1,075 msgs/s
// without it and 1,347 with it (and 705 against 1,201 with the driver's
// own per-statement watcher goroutine, which a cancellable context
// starts), for about 35 µs more CPU a commit. The database/sql path this
// replaced had such a goroutine for every statement, which is why it was
// faster in wall time at more CPU. Why a goroutine queued beside a thread
// blocked in fsync brings that thread back sooner (the Go scheduler's
// handling of a P in a system call with work queued, or the VM's) is not
// established: recheck it on a dedicated machine.
func (s *Store) commitAwake() (done func() error) {
	wait := make(chan struct{})
	checked := make(chan error, 1)
	go func() {
		checked <- s.checkFile()
		<-wait
	}()
	return func() error {
		close(wait)
		return <-checked
	}
}

// closeRaw closes the statements prepared on the writer's driver
// connection, before the connection closes.
func (s *Store) closeRaw() {
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		return
	}
	defer conn.Close()
	conn.Raw(func(dc any) error {
		if s.raw.conn == dc {
			for _, st := range s.raw.stmts {
				st.Close()
			}
		}
		s.raw = rawConn{}
		return nil
	})
}
