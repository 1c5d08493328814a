package postgres_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/fulltext"
	"github.com/mnemehq/mneme/store/storetest"
)

// BenchmarkDurableFloor is BenchmarkDurableAppend's floor on this host:
// the same messages (each one's JSON, as the log keeps it) written durably
// by the database engine alone, through plain SQL, with the commits
// grouped as well as they can be and nothing to gather. "bar" is a row's
// rate over issue 19's bar for its writers: a row below 1 is a bar that no
// store on this engine, writing at least what the row writes, can meet on
// this host.
//
//   - sqlite/1, sqlite/32: a table of the bytes alone, no index, one row a
//     commit, and 32 rows a commit (the ideal group of 32 threads' appends).
//     WAL, synchronous=FULL, through database/sql and modernc.org/sqlite,
//     as the store.
//
//   - -seq: with the unique (tenant, thread, seq) index, the least a log
//     that loads a thread's messages needs.
//
//   - -shape: with what the store writes beside (schema.go): the index,
//     each message's index terms in a table of their own (search reads
//     them, search.go), and its thread's row moved.
//
//   - postgres/1: one connection, one row a statement (autocommit).
//
//   - postgres/32: 32 connections, one row a statement each: the server
//     flushes the WAL once for the commits waiting (its own group commit).
//
//   - postgres/32-batched: one connection, 32 rows a statement: the ideal
//     group, as the store sends a group in one statement; -seq with the
//     unique (tenant, thread, seq) index; -shape as the store's events
//     and threads (schema.go), the row's tsvector made beforehand.
//
//     MNEME_TEST_POSTGRES=postgres://... go test -run '^$' -bench 'DurableFloor|DurableAppend/(sqlite|postgres)' ./store/postgres/
func BenchmarkDurableFloor(b *testing.B) {
	evs := storetest.AgentThread(1000)
	bodies, terms := make([]string, len(evs)), make([]string, len(evs))
	for i := range evs {
		j, err := json.Marshal(evs[i].Message)
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = string(j)
		terms[i] = fulltext.IndexMessage(*evs[i].Message, evs[i].At)
	}
	// Thread names made once: the store is handed its callers' strings.
	threads := make([]string, 32)
	for i := range threads {
		threads[i] = fmt.Sprintf("t%d", i)
	}
	report := func(b *testing.B, name string, cpu0 float64) {
		rate := float64(b.N) / b.Elapsed().Seconds()
		b.ReportMetric(rate, "msgs/s")
		key, _, _ := strings.Cut(name, "-")
		if bar, ok := appendBars[key]; ok {
			b.ReportMetric(rate/bar, "bar")
		}
		b.ReportMetric((float64(storetest.CPUTime().Microseconds())-cpu0)/float64(b.N), "cpu-µs/msg")
	}
	for _, v := range []struct {
		name       string
		per        int
		seq, shape bool
	}{{"sqlite/1", 1, false, false}, {"sqlite/1-seq", 1, true, false}, {"sqlite/1-shape", 1, true, true},
		{"sqlite/32", 32, false, false}, {"sqlite/32-seq", 32, true, false}, {"sqlite/32-shape", 32, true, true}} {
		b.Run(v.name, func(b *testing.B) {
			db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "floor.db")+
				"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			schema := []string{`CREATE TABLE log (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, thread TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL)`}
			if v.seq {
				schema = append(schema, `CREATE UNIQUE INDEX log_seq ON log (tenant, thread, seq)`)
			}
			if v.shape {
				schema = append(schema,
					`CREATE TABLE terms (id INTEGER PRIMARY KEY, terms TEXT NOT NULL)`,
					`CREATE TABLE threads (tenant TEXT, id TEXT, last_seq INTEGER NOT NULL, messages INTEGER NOT NULL, PRIMARY KEY (tenant, id)) WITHOUT ROWID`)
			}
			for _, q := range schema {
				if _, err := db.Exec(q); err != nil {
					b.Fatal(err)
				}
			}
			var sync int
			var journal string
			if err := db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
				b.Fatalf("synchronous is %d, not FULL (2): %v", sync, err)
			}
			if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&journal); err != nil || journal != "wal" {
				b.Fatalf("journal_mode is %q, not wal: %v", journal, err)
			}
			if v.shape {
				for t := range v.per {
					if _, err := db.Exec(`INSERT INTO threads VALUES ('acme', ?, 0, 0)`, threads[t]); err != nil {
						b.Fatal(err)
					}
				}
			}
			// Prepared once, as the store's statements are.
			var stmts [3]*sql.Stmt
			for i, q := range []string{
				`INSERT INTO log (tenant, thread, seq, body) VALUES ('acme', ?, ?, ?)`,
				`INSERT INTO terms (id, terms) VALUES (?, ?)`,
				`UPDATE threads SET last_seq = ?, messages = messages + 1 WHERE tenant = 'acme' AND id = ? AND last_seq = ?`,
			} {
				if i > 0 && !v.shape {
					break
				}
				if stmts[i], err = db.Prepare(q); err != nil {
					b.Fatal(err)
				}
				defer stmts[i].Close()
			}
			b.ResetTimer()
			cpu0 := float64(storetest.CPUTime().Microseconds())
			for i := 0; i < b.N; i += v.per {
				tx, err := db.Begin()
				if err != nil {
					b.Fatal(err)
				}
				insert := tx.Stmt(stmts[0])
				var insertTerms, moveThread *sql.Stmt
				if v.shape {
					insertTerms, moveThread = tx.Stmt(stmts[1]), tx.Stmt(stmts[2])
				}
				for j := i; j < min(i+v.per, b.N); j++ {
					thread, seq := threads[j%v.per], j/v.per
					if v.shape {
						if _, err := moveThread.Exec(seq+1, thread, seq); err != nil {
							b.Fatal(err)
						}
					}
					res, err := insert.Exec(thread, seq, bodies[j%len(bodies)])
					if err != nil {
						b.Fatal(err)
					}
					if v.shape {
						id, err := res.LastInsertId()
						if err == nil {
							_, err = insertTerms.Exec(id, terms[j%len(terms)])
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			report(b, v.name, cpu0)
		})
	}
	for _, v := range []struct {
		name           string
		conns, perStmt int
		seq, shape     bool
	}{{"postgres/1", 1, 1, false, false}, {"postgres/32", 32, 1, false, false}, {"postgres/32-batched", 1, 32, false, false},
		{"postgres/32-batched-seq", 1, 32, true, false}, {"postgres/32-batched-shape", 1, 32, true, true}} {
		b.Run(v.name, func(b *testing.B) {
			pool, err := pgxpool.New(ctx, freshDSN(b))
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			schema := []string{`CREATE TABLE floor_log (id bigserial PRIMARY KEY, tenant text NOT NULL DEFAULT 'acme', thread text NOT NULL, seq bigint NOT NULL, body text NOT NULL)`}
			insert := `INSERT INTO floor_log (thread, seq, body)
				SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])`
			switch {
			case v.shape:
				// As the store's events (schema.go): keyed by thread and
				// seq, a ref unique in its tenant, the terms and their
				// tsvector in a GIN index, rows uncompressed up to 8 KB,
				// and each thread's row moved in the same statement. The
				// GIN index's pending list is never merged in the run (its
				// limit is the largest there is): the store merges it on a
				// connection of its own (gincleaner.go), off the commits. The
				// tsvectors are made before the timer (the store sends
				// them in binary, made in Go), and each row takes its
				// message's.
				schema = []string{
					`CREATE TABLE floor_log (tenant text COLLATE "C" NOT NULL DEFAULT 'acme', thread text COLLATE "C" NOT NULL,
						seq bigint NOT NULL, ref text COLLATE "C", body text, terms text NOT NULL, tsv tsvector,
						PRIMARY KEY (tenant, thread, seq), UNIQUE (tenant, ref)) WITH (toast_tuple_target = 8160)`,
					`CREATE INDEX floor_log_tsv ON floor_log USING gin (tsv) WITH (gin_pending_list_limit = 2097151)`,
					`CREATE TABLE floor_threads (tenant text COLLATE "C" NOT NULL, id text COLLATE "C" NOT NULL,
						last_seq bigint NOT NULL, messages bigint NOT NULL, PRIMARY KEY (tenant, id)) WITH (fillfactor = 70)`,
					`INSERT INTO floor_threads SELECT 'acme', 't' || i, 0, 0 FROM generate_series(0, 31) i`,
					`CREATE TABLE floor_terms (i int PRIMARY KEY, terms text NOT NULL, tsv tsvector NOT NULL)`,
				}
				insert = `WITH r AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::int[]) AS r(thread, seq, body, ref, i)),
				moved AS (UPDATE floor_threads t SET last_seq = r.seq + 1, messages = t.messages + 1
					FROM r WHERE t.tenant = 'acme' AND t.id = r.thread AND t.last_seq = r.seq RETURNING t.id)
				INSERT INTO floor_log (thread, seq, ref, body, terms, tsv)
					SELECT r.thread, r.seq, r.ref, r.body, f.terms, f.tsv FROM r JOIN floor_terms f ON f.i = r.i`
			case v.seq:
				schema = append(schema, `CREATE UNIQUE INDEX floor_log_seq ON floor_log (tenant, thread, seq)`)
			}
			for _, q := range schema {
				if _, err := pool.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			if v.shape {
				for i, t := range terms {
					if _, err := pool.Exec(ctx, `INSERT INTO floor_terms VALUES ($1, $2, to_tsvector('simple', $2))`, i, t); err != nil {
						b.Fatal(err)
					}
				}
			}
			var syncCommit string
			if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&syncCommit); err != nil || syncCommit != "on" {
				b.Fatalf("synchronous_commit is %q, not on: %v", syncCommit, err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			cpu0 := float64(storetest.CPUTime().Microseconds())
			for w := range v.conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					names := make([]string, v.perStmt)
					seqs := make([]int64, v.perStmt)
					rows := make([]string, v.perStmt)
					refs := make([]string, v.perStmt)
					is := make([]int32, v.perStmt)
					for {
						i := next.Add(int64(v.perStmt)) - int64(v.perStmt)
						if i >= int64(b.N) {
							return
						}
						n := int(min(int64(v.perStmt), int64(b.N)-i))
						for j := range n {
							names[j] = threads[w*v.perStmt+j]
							seqs[j] = (i + int64(j)) / int64(v.conns*v.perStmt)
							is[j] = int32((i + int64(j)) % int64(len(bodies)))
							rows[j] = bodies[is[j]]
							if v.shape {
								refs[j] = store.NewRef() // as the store makes a message's ref
							}
						}
						args := []any{names[:n], seqs[:n], rows[:n]}
						if v.shape {
							args = append(args, refs[:n], is[:n])
						}
						if _, err := pool.Exec(ctx, insert, args...); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			report(b, v.name, cpu0)
		})
	}
}
