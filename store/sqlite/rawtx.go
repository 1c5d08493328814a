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
	// nv is the arguments' slice ExecContext converts them into, used
	// again by the next statement: the driver binds them before it
	// returns, and the writer runs one statement at a time.
	nv []driver.NamedValue
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
	nv, err := namedValuesInto(x.c.nv[:0], args)
	if err != nil {
		return nil, err
	}
	x.c.nv = nv
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
	return namedValuesInto(make([]driver.NamedValue, 0, len(args)), args)
}

// namedValuesInto is namedValues appending to nv.
func namedValuesInto(nv []driver.NamedValue, args []any) ([]driver.NamedValue, error) {
	for i, a := range args {
		// The types the writer's statements pass, as the converter would
		// give them without its reflection (an int came back boxed anew).
		switch v := a.(type) {
		case nil, int64, string, []byte, float64, bool:
			nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
			continue
		case int:
			nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: int64(v)})
			continue
		}
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
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	return nv, nil
}

// rawWriteTx runs fn in an IMMEDIATE transaction on the writer's driver
// connection, and, like writeTx, reports the commit as failed when the
// database file is gone or replaced (checkFile).
//
// The check, a stat, is made on the writer after the COMMIT. It used to
// run in a goroutine started before the COMMIT, to overlap the commit's
// fsync, which had once been measured to bring a lone writer back from
// its fsync sooner on a loaded VM. Measured again side by side
// (BenchmarkDurableAppend/sqlite/1, 10,000 appends, this and the
// goroutine's binaries alternated, ten pairs): 193 against 238 µs of CPU
// a message on average (lower in all ten) and 3,772 against 3,577 msgs/s
// (ahead in eight). The goroutine's start and the wakeups it caused were
// the cost, not the stat. With 32 threads, one check a group of ~31, the
// rate was the same (three pairs).
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
		_, err := x.ExecContext(ctx, `COMMIT`)
		if err != nil {
			// A failed COMMIT can leave the transaction open (busy): it
			// must not stay open on the writer.
			x.ExecContext(ctx, `ROLLBACK`)
			return classify("commit", err)
		}
		s.committed()
		return s.checkFile()
	})
	return err
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
