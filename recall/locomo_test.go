package recall_test

import (
	"context"
	"testing"

	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/eval"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/storetest"
)

// The hybrid floor: with a weak embedder (hashing: words, no meaning),
// hybrid search finds LoCoMo's evidence turns at least as well as BM25
// alone, the same questions asked per thread.
func TestHybridFloorLoCoMo(t *testing.T) {
	convs, err := eval.LoadLoCoMo("../../shared/data/locomo")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := inmem.New()
	defer s.Close()
	seqs, err := storetest.LoadConversations(ctx, s, "locomo", convs)
	if err != nil {
		t.Fatal(err)
	}
	emb := embed.Hashing{Dims: 256}
	for _, c := range convs {
		evs, err := s.Load(ctx, "locomo", "locomo-"+c.ID, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		texts := make([]string, len(evs))
		for i, ev := range evs {
			texts[i] = ev.Message.PlainText()
		}
		vs, _ := emb.Embed(ctx, texts)
		var vecs []store.Vector
		for i, ev := range evs {
			vecs = append(vecs, store.Vector{Ref: ev.Ref, Model: emb.Model(), V: vs[i]})
		}
		if err := s.PutVectors(ctx, "locomo", vecs); err != nil {
			t.Fatal(err)
		}
	}
	bm25, err := storetest.MeasureLoCoMo(ctx, (&recall.Recall{Store: s}).Search, "locomo", convs, seqs)
	if err != nil {
		t.Fatal(err)
	}
	hybrid, err := storetest.MeasureLoCoMo(ctx, (&recall.Recall{Store: s, Embedder: emb}).Search, "locomo", convs, seqs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("BM25   %v", bm25)
	t.Logf("hybrid %v", hybrid)
	if hybrid.RecallAt10 < bm25.RecallAt10 || hybrid.HitAt10 < bm25.HitAt10 {
		t.Errorf("hybrid search with a hashing embedder is worse than BM25 alone:\n hybrid %v\n BM25   %v", hybrid, bm25)
	}
}
