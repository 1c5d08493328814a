package postgres_test

import (
	"errors"
	"math"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

func TestVectors(t *testing.T) {
	s := open(t)
	a, err := s.Append(ctx, "acme", "a", 0, []store.Event{msg(message.User, "x"), msg(message.User, "y"), msg(message.User, "z")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Append(ctx, "acme", "b", 0, []store.Event{msg(message.User, "w")})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Append(ctx, "evil", "a", 0, []store.Event{msg(message.User, "v")})
	if err != nil {
		t.Fatal(err)
	}
	put := func(tenant, ref string, v ...float32) {
		t.Helper()
		if err := s.PutVector(ctx, tenant, ref, v); err != nil {
			t.Fatalf("PutVector(%s): %v", ref, err)
		}
	}
	put("acme", a[0].Ref, 1, 0, 0)
	put("acme", a[1].Ref, 0, 1, 0)
	put("acme", a[2].Ref, 1, 1, 0)
	put("acme", b[0].Ref, 0.9, 0.1, 0)
	put("evil", other[0].Ref, 1, 0, 0)
	put("acme", a[1].Ref, 0, 0, 5) // replaces

	hits, err := s.SearchVectors(ctx, "acme", "", []float32{2, 0, 0}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		ref   string
		score float64
	}{{a[0].Ref, 1}, {b[0].Ref, 0.9 / math.Sqrt(0.82)}, {a[2].Ref, 1 / math.Sqrt2}}
	if len(hits) != len(want) {
		t.Fatalf("hits %+v, want %d", hits, len(want))
	}
	for i, w := range want {
		if hits[i].Ref != w.ref || math.Abs(hits[i].Score-w.score) > 1e-6 {
			t.Errorf("hit %d = %+v, want ref %s score %.6f", i, hits[i], w.ref, w.score)
		}
	}
	hits, err = s.SearchVectors(ctx, "acme", "a", []float32{0, 0, 1}, 10)
	if err != nil || len(hits) != 3 || hits[0].Ref != a[1].Ref || hits[0].Thread != "a" || hits[0].Seq != 2 {
		t.Errorf("thread search = %+v, %v", hits, err)
	}
	if hits, _ := s.SearchVectors(ctx, "acme", "", []float32{1, 0}, 10); len(hits) != 0 {
		t.Errorf("another dimension matched: %+v", hits)
	}
	if err := s.PutVector(ctx, "evil", a[0].Ref, []float32{1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutVector on another tenant's ref: %v", err)
	}
	for _, v := range [][]float32{nil, {0, 0}, {float32(math.NaN())}, {float32(math.Inf(1))}} {
		if err := s.PutVector(ctx, "acme", a[0].Ref, v); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutVector(%v) err = %v, want ErrInvalid", v, err)
		}
	}
	if err := s.DeleteThread(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	hits, _ = s.SearchVectors(ctx, "acme", "", []float32{1, 0, 0}, 10)
	if len(hits) != 1 || hits[0].Ref != b[0].Ref {
		t.Errorf("after DeleteThread: %+v", hits)
	}
}
