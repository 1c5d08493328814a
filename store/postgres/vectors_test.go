package postgres_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/store/postgres"
)

// The semantics of store.Vectors are checked by storetest.RunVectors
// (vectors_conformance_test.go); these tests cover what is PostgreSQL's own.

// TestVectorsExactCosine: the score computed in SQL over real[] is the
// exact cosine backend.Cosine computes in Go, and the order follows it.
func TestVectorsExactCosine(t *testing.T) {
	s := open(t)
	const n, dims = 60, 97
	rng := rand.New(rand.NewPCG(7, 11))
	randVec := func() []float32 {
		v := make([]float32, dims)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	var evs []store.Event
	for i := range n {
		evs = append(evs, msg(message.User, fmt.Sprintf("message %d", i)))
	}
	evs, err := s.Append(ctx, "acme", "t", 0, evs)
	if err != nil {
		t.Fatal(err)
	}
	byRef := map[string][]float32{}
	var vs []store.Vector
	for _, ev := range evs {
		v := randVec()
		byRef[ev.Ref] = v
		vs = append(vs, store.Vector{Ref: ev.Ref, Model: "m", V: v})
	}
	if err := s.PutVectors(ctx, "acme", vs); err != nil {
		t.Fatal(err)
	}
	q := randVec()
	hits, err := s.SearchVectors(ctx, "acme", store.VectorQuery{Model: "m", V: q, Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != n {
		t.Fatalf("%d hits, want %d", len(hits), n)
	}
	for i, h := range hits {
		if want := backend.Cosine(q, byRef[h.Ref]); math.Abs(h.Score-want) > 1e-9 {
			t.Errorf("hit %d (%s): score %.12f, backend.Cosine %.12f", i, h.Ref, h.Score, want)
		}
		if i > 0 && h.Score > hits[i-1].Score {
			t.Errorf("hit %d scores %v, above hit %d's %v", i, h.Score, i-1, hits[i-1].Score)
		}
	}
}

// TestVectorsMigration: a database at schema version 1 (vectors without a
// model) opens at the current version; its vectors, which no model can be
// attributed to, are dropped, its events kept, and vectors work.
func TestVectorsMigration(t *testing.T) {
	dsn := freshDSN(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	m, err := json.Marshal(message.NewText(message.User, "written by version 1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())`,
		postgres.Migration(1),
		`INSERT INTO schema_migrations (version) VALUES (1)`,
		`INSERT INTO threads (tenant, id, created, updated, last_seq, messages) VALUES ('acme', 'old', 1, 1, 1, 1)`,
		`INSERT INTO events (tenant, thread, seq, kind, at, ref, role, message) VALUES ('acme', 'old', 1, 'message', 1, 'm_old', 'user', '` + string(m) + `')`,
		`INSERT INTO vectors (tenant, ref, thread, seq, dims, norm, v) VALUES ('acme', 'm_old', 'old', 1, 2, 1, '{1,0}')`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("set up version 1: %v", err)
		}
	}
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var version, vectors int
	if err := conn.QueryRow(ctx, `SELECT max(version), (SELECT count(*) FROM vectors) FROM schema_migrations`).Scan(&version, &vectors); err != nil {
		t.Fatal(err)
	}
	if version != postgres.SchemaVersion || vectors != 0 {
		t.Errorf("after Open: version %d, %d vectors; want %d, 0", version, vectors, postgres.SchemaVersion)
	}
	evs, err := s.Load(ctx, "acme", "old", 0, 0)
	if err != nil || len(evs) != 1 || evs[0].Ref != "m_old" {
		t.Fatalf("version 1 events after the upgrade: %+v, %v", evs, err)
	}
	if err := s.PutVectors(ctx, "acme", []store.Vector{{Ref: "m_old", Model: "m", V: []float32{1, 0}}}); err != nil {
		t.Fatal(err)
	}
	hits, err := s.SearchVectors(ctx, "acme", store.VectorQuery{Model: "m", V: []float32{1, 0}})
	if err != nil || len(hits) != 1 || hits[0].Ref != "m_old" || hits[0].Thread != "old" || hits[0].Seq != 1 {
		t.Errorf("search after the upgrade: %+v, %v", hits, err)
	}
}

// TestVectorsDeleteRace: PutVectors racing DeleteThread (a background
// embedder behind a deletion) never fails and never leaves a vector of the
// deleted thread.
func TestVectorsDeleteRace(t *testing.T) {
	s := open(t)
	for round := range 8 {
		thread := fmt.Sprintf("t%d", round)
		var evs []store.Event
		for i := range 40 {
			evs = append(evs, msg(message.User, fmt.Sprintf("m %d", i)))
		}
		evs, err := s.Append(ctx, "acme", thread, 0, evs)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < len(evs); i += 4 {
					if err := s.PutVectors(ctx, "acme", []store.Vector{{Ref: evs[i].Ref, Model: "m", V: []float32{1, float32(i)}}}); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Go(func() {
			if err := s.DeleteThread(ctx, "acme", thread); err != nil {
				t.Errorf("DeleteThread: %v", err)
			}
		})
		wg.Wait()
		for w, err := range errs {
			if err != nil {
				t.Errorf("round %d, writer %d: PutVectors: %v", round, w, err)
			}
		}
		var left int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM vectors WHERE thread = $1`, thread).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Errorf("round %d: %d vectors of the deleted thread remain", round, left)
		}
	}
}
