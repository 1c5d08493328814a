package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/mnemehq/mneme/store"
)

// A context that ends while sqlite-vec works must end the call, never the
// process (vectors.go, vecContext). sqlite-vec prepares its statements
// lazily, inside the first statement of a connection that needs them, so
// each round opens the store again (new connections) and ends the call's
// context at a random moment. Before vecContext, PutVectors crashed the
// test binary within a few hundred rounds, or failed with an error that was
// not the context's (a nil dereference in
// sqlite3_clear_bindings, under vec0_get_chunk_position).
func TestVectorsContextEnds(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	vec := func(i int) []float32 {
		v := make([]float32, 64)
		for j := range v {
			v[j] = float32((i*31+j*7)%97) / 97
		}
		v[i%64] += 1
		return v
	}
	// thread appends n messages to a new thread and embeds them.
	thread := func(s *Store, name string, n int) []store.Vector {
		t.Helper()
		var evs []store.Event
		for i := range n {
			evs = append(evs, msgEvent(fmt.Sprintf("%s message %d", name, i))...)
		}
		out, err := s.Append(ctx, "default", name, 0, evs)
		if err != nil {
			t.Fatal(err)
		}
		vs := make([]store.Vector, n)
		for i, ev := range out {
			vs[i] = store.Vector{Ref: ev.Ref, Model: "m", V: vec(i)}
		}
		if err := s.PutVectors(ctx, "default", vs); err != nil {
			t.Fatal(err)
		}
		return vs
	}
	open := func() *Store {
		t.Helper()
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ending := func() (context.Context, context.CancelFunc) {
		c, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Duration(rand.IntN(1500))*time.Microsecond, cancel)
		return c, cancel
	}
	ended := func(err error) bool { return err == nil || errors.Is(err, context.Canceled) }

	s := open()
	vs := thread(s, "kept", 50)
	s.Close()
	for i := range 500 {
		s := open()
		c, cancel := ending()
		if err := s.PutVectors(c, "default", vs[i%45:i%45+5]); !ended(err) {
			t.Fatalf("PutVectors: %v", err)
		}
		if _, err := s.SearchVectors(c, "default", store.VectorQuery{V: vec(i), Model: "m", Limit: 5}); !ended(err) {
			t.Fatalf("SearchVectors: %v", err)
		}
		cancel()
		if i%10 == 0 {
			// Deleting a thread deletes its vectors through the events'
			// trigger, in the same statement.
			name := fmt.Sprintf("gone%d", i)
			thread(s, name, 5)
			s.Close()
			s = open()
			c, cancel := ending()
			if err := s.DeleteThread(c, "default", name); !ended(err) {
				t.Fatalf("DeleteThread: %v", err)
			}
			cancel()
		}
		s.Close()
	}
	// Whatever ended early, the store still answers, with every vector of
	// the kept thread (a delete whose context ended before it began left
	// its thread, and the others are not counted).
	s = open()
	defer s.Close()
	hits, err := s.SearchVectors(ctx, "default", store.VectorQuery{V: vec(3), Model: "m", Thread: "kept", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != len(vs) {
		t.Fatalf("%d vectors found after the rounds, want the %d kept", len(hits), len(vs))
	}
}
