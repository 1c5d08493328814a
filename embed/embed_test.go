package embed_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mnemehq/mneme/embed"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/store/backend"
)

func TestHashingDeterministicAndSimilar(t *testing.T) {
	h := embed.Hashing{Dims: 128}
	vs, err := h.Embed(context.Background(), []string{
		"the checkout service failed with a timeout",
		"the checkout service failed with a timeout",
		"checkout timeout in the payment service",
		"banana bread recipe with walnuts",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs[0]) != 128 || h.Model() != "hashing-128" {
		t.Fatalf("dims %d model %q", len(vs[0]), h.Model())
	}
	if c := backend.Cosine(vs[0], vs[1]); c < 0.9999 {
		t.Errorf("same text: cosine %v, want 1", c)
	}
	related, unrelated := backend.Cosine(vs[0], vs[2]), backend.Cosine(vs[0], vs[3])
	if related <= unrelated {
		t.Errorf("related text cosine %v should beat unrelated %v", related, unrelated)
	}
}

// The remote client against the fake server gives the same vectors as the
// local hashing embedder (both formats), in input order, across batches.
func TestOpenAIAgainstFake(t *testing.T) {
	srv := fakellm.Start()
	defer srv.Close()
	texts := []string{"alpha beta", "", "gamma INV-4401 delta", "alpha"}
	o := &embed.OpenAI{BaseURL: srv.URL() + "/v1", EmbeddingModel: "text-embedding-3-small", Dimensions: 64, MaxBatch: 3}
	got, err := o.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := embed.Hashing{Dims: 64}.Embed(context.Background(), []string{"alpha beta", " ", "gamma INV-4401 delta", "alpha"})
	if len(got) != len(want) {
		t.Fatalf("%d vectors, want %d", len(got), len(want))
	}
	for i := range want {
		if c := backend.Cosine(got[i], want[i]); c < 0.9999 {
			t.Errorf("text %d: cosine with local hashing %v", i, c)
		}
	}
	if o.Model() != "text-embedding-3-small@64" {
		t.Errorf("model %q", o.Model())
	}
}

func TestOpenAIFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"status", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":"down"}`, http.StatusServiceUnavailable)
		}},
		{"not json", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }},
		{"count", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"data":[]}`)) }},
		{"bad index", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"data":[{"index":5,"embedding":[1,2]}]}`))
		}},
		{"bad base64", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"data":[{"index":0,"embedding":"!!!"}]}`))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			o := &embed.OpenAI{BaseURL: srv.URL, EmbeddingModel: "m"}
			_, err := o.Embed(context.Background(), []string{"x"})
			if !errors.Is(err, embed.ErrEmbed) {
				t.Fatalf("err = %v, want ErrEmbed", err)
			}
		})
	}
	if _, err := (&embed.OpenAI{}).Embed(context.Background(), []string{"x"}); !errors.Is(err, embed.ErrEmbed) {
		t.Errorf("unconfigured: %v", err)
	}
}
