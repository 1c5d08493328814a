package storetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// RunVectors runs the conformance suite of store.Vectors: ranking by exact
// cosine, replacement, tenant isolation (I8), model and dimension
// separation, the Search filters, refs that name nothing, validation, and
// deletion with the thread. open must return a new, empty store that
// implements store.Vectors; a store that does not fails the suite.
func RunVectors(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store, v store.Vectors)
	}{
		{"Ranking", testVectorRanking},
		{"Replace", testVectorReplace},
		{"TenantIsolation", testVectorTenants},
		{"Models", testVectorModels},
		{"Filters", testVectorFilters},
		{"SkippedRefs", testVectorSkipped},
		{"Invalid", testVectorInvalid},
		{"DeleteThread", testVectorDelete},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			v, ok := store.As[store.Vectors](s)
			if !ok {
				t.Fatalf("%T does not implement store.Vectors", s)
			}
			tc.fn(t, s, v)
		})
	}
}

const vecModel = "test-embed-3"

func mustPutVectors(t *testing.T, v store.Vectors, tenant string, vs ...store.Vector) {
	t.Helper()
	if err := v.PutVectors(ctx, tenant, vs); err != nil {
		t.Fatalf("PutVectors(%s): %v", tenant, err)
	}
}

func mustSearchVectors(t *testing.T, v store.Vectors, tenant string, q store.VectorQuery) []store.Hit {
	t.Helper()
	hits, err := v.SearchVectors(ctx, tenant, q)
	if err != nil {
		t.Fatalf("SearchVectors(%s, %+v): %v", tenant, q, err)
	}
	return hits
}

func hitRefs(hits []store.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Ref)
	}
	return out
}

// vec is a Vector of the default model.
func vec(ref string, xs ...float32) store.Vector {
	return store.Vector{Ref: ref, Model: vecModel, V: xs}
}

// testVectorRanking: hits come best first with the exact cosine as Score,
// and carry the event's thread, ref, seq, role, tool and time.
func testVectorRanking(t *testing.T, s store.Store, v store.Vectors) {
	evs := loadArchive(t, s)
	b := mustAppend(t, s, "acme", "b", 0, text(message.User, "another thread"))
	mustPutVectors(t, v, "acme",
		vec(evs[0].Ref, 1, 0, 0),
		vec(evs[1].Ref, 0, 1, 0),
		vec(evs[2].Ref, 1, 1, 0),
		vec(b[0].Ref, 0.9, 0.1, 0),
		vec(evs[3].Ref, -1, 0, 0),
	)
	q := []float32{2, 0, 0} // the norm does not matter
	hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: q, Limit: 5})
	want := []struct {
		ref string
		ev  store.Event
	}{{evs[0].Ref, evs[0]}, {b[0].Ref, b[0]}, {evs[2].Ref, evs[2]}, {evs[1].Ref, evs[1]}, {evs[3].Ref, evs[3]}}
	wantScore := []float64{1, 0.9 / math.Sqrt(0.82), 1 / math.Sqrt2, 0, -1}
	if len(hits) != len(want) {
		t.Fatalf("hits %v, want %d", hitRefs(hits), len(want))
	}
	for i, w := range want {
		h := hits[i]
		if h.Ref != w.ref || math.Abs(h.Score-wantScore[i]) > 1e-6 {
			t.Errorf("hit %d = %s score %.7f, want %s score %.7f", i, h.Ref, h.Score, w.ref, wantScore[i])
			continue
		}
		if h.Seq != w.ev.Seq || !h.At.Equal(w.ev.At) || h.Role != w.ev.Message.Role || h.Snippet != "" {
			t.Errorf("hit %d = %+v, want seq %d at %v role %s, no snippet", i, h, w.ev.Seq, w.ev.At, w.ev.Message.Role)
		}
		if h.Score < -1 || h.Score > 1 {
			t.Errorf("hit %d score %v outside [-1, 1]", i, h.Score)
		}
	}
	if hits[0].Thread != "inv" || hits[1].Thread != "b" {
		t.Errorf("threads %q, %q, want inv, b", hits[0].Thread, hits[1].Thread)
	}
	// The tool result names its tool, as in Search.
	hits = mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{1, 1, 0}, Limit: 1})
	if len(hits) != 1 || hits[0].Ref != evs[2].Ref || hits[0].Tool != "lookup_invoice" || hits[0].Role != message.Tool {
		t.Errorf("tool result hit = %+v, want ref %s role tool, tool lookup_invoice", hits, evs[2].Ref)
	}
	// Limit keeps the best.
	hits = mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: q, Limit: 2})
	if got := hitRefs(hits); !slices.Equal(got, []string{evs[0].Ref, b[0].Ref}) {
		t.Errorf("limit 2 = %v, want the best two", got)
	}
	// A model nobody used gives nothing, not an error.
	if hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: "never-used", V: q}); len(hits) != 0 {
		t.Errorf("unused model: %+v", hits)
	}
}

// testVectorReplace: putting a ref again replaces its vector, also under
// another model.
func testVectorReplace(t *testing.T, s store.Store, v store.Vectors) {
	evs := mustAppend(t, s, "acme", "t", 0, text(message.User, "one"), text(message.User, "two"))
	mustPutVectors(t, v, "acme", vec(evs[0].Ref, 1, 0), vec(evs[1].Ref, 0, 1))
	mustPutVectors(t, v, "acme", vec(evs[0].Ref, 0, 3))
	hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{0, 1}})
	if len(hits) != 2 || math.Abs(hits[0].Score-1) > 1e-6 || math.Abs(hits[1].Score-1) > 1e-6 {
		t.Fatalf("after replacing: %+v, want both refs at score 1", hits)
	}
	if hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{1, 0}}); len(hits) != 2 || math.Abs(hits[0].Score) > 1e-6 {
		t.Errorf("the replaced vector still answers: %+v", hits)
	}
	// Within one call, the last vector of a ref wins.
	mustPutVectors(t, v, "acme", vec(evs[1].Ref, 1, 0), vec(evs[1].Ref, -1, 0))
	hits = mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{-1, 0}, Limit: 1})
	if len(hits) != 1 || hits[0].Ref != evs[1].Ref || math.Abs(hits[0].Score-1) > 1e-6 {
		t.Errorf("last of two in one call: %+v", hits)
	}
	// Re-embedded by another model of the same dimension: the old model's
	// vector is gone.
	mustPutVectors(t, v, "acme", store.Vector{Ref: evs[0].Ref, Model: "other-model", V: []float32{0, 1}})
	hits = mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{0, 1}})
	if got := hitRefs(hits); !slices.Equal(got, []string{evs[1].Ref}) {
		t.Errorf("old model after re-embedding = %v, want only %s", got, evs[1].Ref)
	}
	hits = mustSearchVectors(t, v, "acme", store.VectorQuery{Model: "other-model", V: []float32{0, 1}})
	if got := hitRefs(hits); !slices.Equal(got, []string{evs[0].Ref}) {
		t.Errorf("new model = %v, want %s", got, evs[0].Ref)
	}
}

// testVectorTenants: I8. A tenant neither sees nor writes another's
// vectors, even knowing its refs.
func testVectorTenants(t *testing.T, s store.Store, v store.Vectors) {
	acme := mustAppend(t, s, "acme", "a", 0, text(message.User, "acme's secret"))
	evil := mustAppend(t, s, "evil", "a", 0, text(message.User, "evil's own"))
	mustPutVectors(t, v, "acme", vec(acme[0].Ref, 1, 0, 0))
	mustPutVectors(t, v, "evil", vec(evil[0].Ref, 0, 1, 0))
	// evil writes on acme's ref: skipped silently, acme's vector untouched,
	// and evil gains nothing.
	mustPutVectors(t, v, "evil", vec(acme[0].Ref, -1, 0, 0))
	for _, c := range []struct {
		tenant string
		q      []float32
		want   []string
	}{
		{"acme", []float32{1, 0, 0}, []string{acme[0].Ref}},
		{"acme", []float32{0, 1, 0}, []string{acme[0].Ref}},
		{"evil", []float32{1, 0, 0}, []string{evil[0].Ref}},
		{"evil", []float32{-1, 0, 0}, []string{evil[0].Ref}},
		{"nobody", []float32{1, 0, 0}, nil},
	} {
		hits := mustSearchVectors(t, v, c.tenant, store.VectorQuery{Model: vecModel, V: c.q, Thread: "a"})
		if got := hitRefs(hits); !slices.Equal(got, c.want) {
			t.Errorf("%s searching %v: %v, want %v", c.tenant, c.q, got, c.want)
		}
	}
	hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{1, 0, 0}})
	if len(hits) != 1 || math.Abs(hits[0].Score-1) > 1e-6 || hits[0].Thread != "a" {
		t.Errorf("acme's vector after evil's write: %+v, want score 1", hits)
	}
}

// testVectorModels: vectors of another model or dimension never meet the
// query.
func testVectorModels(t *testing.T, s store.Store, v store.Vectors) {
	evs := mustAppend(t, s, "acme", "t", 0,
		text(message.User, "a"), text(message.User, "b"), text(message.User, "c"), text(message.User, "d"))
	mustPutVectors(t, v, "acme",
		store.Vector{Ref: evs[0].Ref, Model: "m1", V: []float32{1, 0, 0}},
		store.Vector{Ref: evs[1].Ref, Model: "m2", V: []float32{1, 0, 0}},
		store.Vector{Ref: evs[2].Ref, Model: "m1", V: []float32{1, 0}},
		store.Vector{Ref: evs[3].Ref, Model: "m1", V: []float32{0.5, 0.5, 0}},
	)
	for _, c := range []struct {
		model string
		q     []float32
		want  []string
	}{
		{"m1", []float32{1, 0, 0}, []string{evs[0].Ref, evs[3].Ref}},
		{"m2", []float32{1, 0, 0}, []string{evs[1].Ref}},
		{"m1", []float32{1, 0}, []string{evs[2].Ref}},
		{"m2", []float32{1, 0}, nil},
		{"m1", []float32{1, 0, 0, 0}, nil},
		{"M1", []float32{1, 0, 0}, nil}, // model names are exact
	} {
		hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: c.model, V: c.q})
		if got := hitRefs(hits); !slices.Equal(got, c.want) {
			t.Errorf("model %s, %d dims: %v, want %v", c.model, len(c.q), got, c.want)
		}
	}
}

// testVectorFilters: the filters mean what they mean in Search.
func testVectorFilters(t *testing.T, s store.Store, v store.Vectors) {
	evs := loadArchive(t, s)
	other := mustAppend(t, s, "acme", "other", 0, text(message.User, "elsewhere"))
	var vs []store.Vector
	for i, ev := range append(evs, other...) {
		// All near (1, 1), each a little apart, so every one is a hit.
		vs = append(vs, vec(ev.Ref, 1, 1+float32(i)/100))
	}
	mustPutVectors(t, v, "acme", vs...)
	at := func(min int) time.Time { return archiveBase.Add(time.Duration(min) * time.Minute) }
	q := []float32{1, 1}
	cases := []struct {
		name string
		q    store.VectorQuery
		want []int64 // sorted seqs
	}{
		{"thread", store.VectorQuery{Thread: "inv"}, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"other thread", store.VectorQuery{Thread: "other"}, []int64{1}},
		{"unknown thread", store.VectorQuery{Thread: "nope"}, nil},
		{"role", store.VectorQuery{Thread: "inv", Role: message.Assistant}, []int64{2, 6}},
		{"role all threads", store.VectorQuery{Role: message.User, Limit: 20}, []int64{1, 1, 4, 5, 7, 8}},
		{"tool", store.VectorQuery{Tool: "lookup_invoice"}, []int64{3}},
		{"named tool result", store.VectorQuery{Tool: "search_docs"}, []int64{9}},
		{"tool none", store.VectorQuery{Tool: "cat"}, nil},
		{"seq range", store.VectorQuery{Thread: "inv", FromSeq: 2, ToSeq: 3}, []int64{2, 3}},
		{"from seq", store.VectorQuery{Thread: "inv", FromSeq: 8}, []int64{8, 9}},
		{"to seq", store.VectorQuery{Thread: "inv", ToSeq: 2}, []int64{1, 2}},
		{"since", store.VectorQuery{Thread: "inv", Since: at(8)}, []int64{8, 9}},
		{"until", store.VectorQuery{Thread: "inv", Until: at(2)}, []int64{1, 2}},
		{"window", store.VectorQuery{Thread: "inv", Since: at(2), Until: at(2)}, []int64{2}},
		{"all", store.VectorQuery{Thread: "inv", Role: message.Tool, Tool: "search_docs", FromSeq: 9, ToSeq: 9, Since: at(9), Until: at(9)}, []int64{9}},
		{"disjoint", store.VectorQuery{Thread: "inv", Role: message.User, Tool: "lookup_invoice"}, nil},
	}
	for _, c := range cases {
		c.q.Model, c.q.V = vecModel, q
		hits, err := v.SearchVectors(ctx, "acme", c.q)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := hitSeqs(hits); !slices.Equal(got, c.want) {
			t.Errorf("%s: seqs %v, want %v", c.name, got, c.want)
		}
		for i := 1; i < len(hits); i++ {
			if hits[i].Score > hits[i-1].Score {
				t.Errorf("%s: hit %d scores %v above hit %d's %v", c.name, i, hits[i].Score, i-1, hits[i-1].Score)
			}
		}
	}
	// 25 vectors in all: the default limit is 10, a limit past the maximum
	// is the maximum.
	var many []store.Event
	for i := range 15 {
		many = append(many, text(message.User, fmt.Sprintf("many %d", i)))
	}
	manyEvs := mustAppend(t, s, "acme", "many", 0, many...)
	vs = vs[:0]
	for _, ev := range manyEvs {
		vs = append(vs, vec(ev.Ref, 1, 1))
	}
	mustPutVectors(t, v, "acme", vs...)
	if hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: q}); len(hits) != 10 {
		t.Errorf("default limit gave %d hits, want 10", len(hits))
	}
	if hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: q, Limit: store.MaxVectorLimit + 5}); len(hits) != 25 {
		t.Errorf("limit past the maximum gave %d hits, want all 25", len(hits))
	}
}

// testVectorSkipped: refs that name no message event of the tenant are
// skipped silently, and the rest of the call is stored.
func testVectorSkipped(t *testing.T, s store.Store, v store.Vectors) {
	evs := mustAppend(t, s, "acme", "t", 0, text(message.User, "kept"))
	mustPutVectors(t, v, "acme",
		vec(store.NewRef(), 1, 0),
		vec("not-a-ref-at-all", 1, 0),
		vec(strings.Repeat("r", 256), 1, 0),
		vec(evs[0].Ref, 1, 0),
	)
	hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{1, 0}})
	if got := hitRefs(hits); !slices.Equal(got, []string{evs[0].Ref}) {
		t.Errorf("hits %v, want only %s", got, evs[0].Ref)
	}
	if err := v.PutVectors(ctx, "acme", nil); err != nil {
		t.Errorf("PutVectors(nil) = %v", err)
	}
}

// testVectorInvalid: bad vectors and queries are ErrInvalid, and a call
// with one bad vector stores none.
func testVectorInvalid(t *testing.T, s store.Store, v store.Vectors) {
	evs := mustAppend(t, s, "acme", "t", 0, text(message.User, "x"))
	ref := evs[0].Ref
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	puts := []struct {
		name   string
		tenant string
		v      store.Vector
	}{
		{"empty tenant", "", vec(ref, 1)},
		{"empty ref", "acme", vec("", 1)},
		{"long ref", "acme", vec(strings.Repeat("r", 257), 1)},
		{"empty model", "acme", store.Vector{Ref: ref, V: []float32{1}}},
		{"long model", "acme", store.Vector{Ref: ref, Model: strings.Repeat("m", 257), V: []float32{1}}},
		{"no components", "acme", vec(ref)},
		{"zero", "acme", vec(ref, 0, 0)},
		{"NaN", "acme", vec(ref, 1, nan)},
		{"Inf", "acme", vec(ref, inf, 1)},
		{"too long", "acme", vec(ref, make([]float32, store.MaxVectorDims+1)...)},
	}
	for _, c := range puts {
		err := v.PutVectors(ctx, c.tenant, []store.Vector{vec(ref, 1, 1), c.v})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutVectors %s: %v, want ErrInvalid", c.name, err)
		}
	}
	if hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: []float32{1, 1}}); len(hits) != 0 {
		t.Errorf("a rejected call stored %v", hitRefs(hits))
	}
	searches := []struct {
		name   string
		tenant string
		q      store.VectorQuery
	}{
		{"empty tenant", "", store.VectorQuery{Model: vecModel, V: []float32{1}}},
		{"empty model", "acme", store.VectorQuery{V: []float32{1}}},
		{"no vector", "acme", store.VectorQuery{Model: vecModel}},
		{"zero vector", "acme", store.VectorQuery{Model: vecModel, V: []float32{0}}},
		{"NaN", "acme", store.VectorQuery{Model: vecModel, V: []float32{nan}}},
		{"negative FromSeq", "acme", store.VectorQuery{Model: vecModel, V: []float32{1}, FromSeq: -1}},
		{"too long", "acme", store.VectorQuery{Model: vecModel, V: make([]float32, store.MaxVectorDims+1)}},
	}
	for _, c := range searches {
		if _, err := v.SearchVectors(ctx, c.tenant, c.q); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SearchVectors %s: %v, want ErrInvalid", c.name, err)
		}
	}
	// The largest vector is accepted.
	big := make([]float32, store.MaxVectorDims)
	big[7] = 1
	mustPutVectors(t, v, "acme", vec(ref, big...))
	if hits := mustSearchVectors(t, v, "acme", store.VectorQuery{Model: vecModel, V: big}); len(hits) != 1 || math.Abs(hits[0].Score-1) > 1e-6 {
		t.Errorf("%d-dimension vector: %+v", store.MaxVectorDims, hits)
	}
}

// testVectorDelete: DeleteThread takes the thread's vectors with it; they
// never come back, not through a late PutVectors nor a thread of the same
// name.
func testVectorDelete(t *testing.T, s store.Store, v store.Vectors) {
	doomed := mustAppend(t, s, "acme", "doomed", 0, text(message.User, "x"), text(message.User, "y"))
	kept := mustAppend(t, s, "acme", "kept", 0, text(message.User, "z"))
	mustPutVectors(t, v, "acme", vec(doomed[0].Ref, 1, 0), vec(doomed[1].Ref, 1, 0.1), vec(kept[0].Ref, 1, 0.2))
	q := store.VectorQuery{Model: vecModel, V: []float32{1, 0}}
	if hits := mustSearchVectors(t, v, "acme", q); len(hits) != 3 {
		t.Fatalf("before delete %d hits, want 3: the check below would prove nothing", len(hits))
	}
	if err := s.DeleteThread(ctx, "acme", "doomed"); err != nil {
		t.Fatal(err)
	}
	if got := hitRefs(mustSearchVectors(t, v, "acme", q)); !slices.Equal(got, []string{kept[0].Ref}) {
		t.Errorf("after delete: %v, want only %s", got, kept[0].Ref)
	}
	// A background embedder that lags behind the deletion.
	mustPutVectors(t, v, "acme", vec(doomed[0].Ref, 1, 0))
	again := mustAppend(t, s, "acme", "doomed", 0, text(message.User, "x"))
	if got := hitRefs(mustSearchVectors(t, v, "acme", q)); !slices.Equal(got, []string{kept[0].Ref}) {
		t.Errorf("after a late put and a new thread of the same name: %v, want only %s", got, kept[0].Ref)
	}
	mustPutVectors(t, v, "acme", vec(again[0].Ref, 1, 0))
	if got := hitRefs(mustSearchVectors(t, v, "acme", q)); !slices.Equal(got, []string{again[0].Ref, kept[0].Ref}) {
		t.Errorf("the new thread's vector: %v, want %s then %s", got, again[0].Ref, kept[0].Ref)
	}
}
