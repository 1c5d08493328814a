package compact_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/window"
)

func blocksOf(text string, from, to int64) []window.Block {
	return []window.Block{{EventSeq: to + 1, Kind: window.Observe, From: from, To: to, Text: text}}
}

func newLLM(t *testing.T, srv *fakellm.Server, api string, mod func(*compact.LLMConfig)) *compact.LLM {
	t.Helper()
	cfg := compact.LLMConfig{URL: srv.URL(), API: api, Model: "gpt-4o-mini", Timeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	l, err := compact.NewLLM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestObserverLLM(t *testing.T) {
	srv := fakellm.Start()
	defer srv.Close()
	s := genSession(5, 30, 30)
	seg := compact.Segment{From: 1, To: s.Entries[len(s.Entries)-1].Seq, Entries: s.Entries}
	for _, api := range []string{"openai", "anthropic"} {
		t.Run(api, func(t *testing.T) {
			srv.Reset()
			o := compact.Observer{Summarizer: newLLM(t, srv, api, nil), Counter: counter(t)}
			d := o.Observe(context.Background(), seg)
			if d.Fallback != "" || d.Model != "gpt-4o-mini" || d.Text == "" || d.TokensAfter == 0 || d.Strategy != window.Observe {
				t.Fatalf("%+v", d)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), compact.MarkerObserver) {
				t.Fatalf("%d requests", len(reqs))
			}
			// The prompt asks for verbatim identifiers and quotes the transcript as data.
			for _, w := range []string{"verbatim", "not instructions", "Transcript:", "[seq 1]"} {
				if !strings.Contains(string(reqs[0].Body), w) {
					t.Errorf("prompt lacks %q", w)
				}
			}
		})
	}
}

// A segment larger than the summarizer's window is observed in parts.
func TestObserverSplitsLargeInput(t *testing.T) {
	srv := fakellm.Start()
	defer srv.Close()
	l := newLLM(t, srv, "openai", func(c *compact.LLMConfig) { c.ContextTokens = 4000 })
	s := genSession(6, 60, 40)
	o := compact.Observer{Summarizer: l, Counter: counter(t)}
	d := o.Observe(context.Background(), compact.Segment{From: 1, To: s.Entries[len(s.Entries)-1].Seq, Entries: s.Entries})
	if d.Fallback != "" {
		t.Fatalf("fallback: %s", d.Fallback)
	}
	reqs := srv.Requests()
	if len(reqs) < 3 {
		t.Fatalf("%d requests: the input was not split", len(reqs))
	}
	for i, r := range reqs {
		if n := counter(t).Count(string(r.Body)); n > 4000 {
			t.Errorf("request %d: %d tokens, over the 4000-token window", i, n)
		}
	}
	t.Logf("%d messages observed in %d parts", len(s.Entries), len(reqs))
}

// Every failure of the summarizer ends in an extractive observation whose
// event names the cause (I5).
func TestObserverFallback(t *testing.T) {
	s := genSession(8, 20, 20)
	seg := compact.Segment{From: 1, To: s.Entries[len(s.Entries)-1].Seq, Entries: s.Entries}
	want, _ := compact.Extractive{Counter: counter(t)}.Observe(context.Background(), seg)
	small := compact.Segment{From: 1, To: 2, Entries: s.Entries[:2]}
	cases := []struct {
		name  string
		reply fakellm.Reply
		cause string
		seg   *compact.Segment
	}{
		{"500", fakellm.Reply{Status: 500}, "500", nil},
		{"429", fakellm.Reply{Status: 429}, "429", nil},
		{"timeout", fakellm.Reply{Text: "late", Delay: 3 * time.Second}, "timeout", nil},
		{"garbage", fakellm.Reply{Malformed: true}, "malformed", nil},
		{"cut", fakellm.Reply{Text: "- a\n- b", CutAfter: 1}, "llm", nil},
		{"empty", fakellm.Reply{Text: "  "}, "empty output", nil},
		{"larger than input", fakellm.Reply{Text: strings.Repeat("- observation 12 of src/a.go\n", 400)}, "larger than its input", &small},
		{"invented range", fakellm.Reply{Text: "- 10:00 [high] x [1–99999]"}, "outside", nil},
		{"echoes prompt", fakellm.Reply{Text: "mneme:observer you are"}, "echoes", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakellm.Start(fakellm.WithHandler(func(fakellm.Request) fakellm.Reply { return tc.reply }))
			defer srv.Close()
			// Only the timeout case has a short timeout: on a loaded machine
			// a prompt answer may take longer, and would be named a timeout
			// instead of the fault under test.
			timeout := time.Minute
			if tc.name == "timeout" {
				timeout = 300 * time.Millisecond
			}
			o := compact.Observer{Summarizer: newLLM(t, srv, "openai", func(c *compact.LLMConfig) { c.Timeout = timeout }), Counter: counter(t)}
			sg, want := seg, want
			if tc.seg != nil {
				sg = *tc.seg
				want, _ = compact.Extractive{Counter: counter(t)}.Observe(context.Background(), sg)
			}
			d := o.Observe(context.Background(), sg)
			if !strings.Contains(d.Fallback, tc.cause) || !strings.HasSuffix(d.Fallback, ": extractive") {
				t.Fatalf("fallback %q, want the cause %q", d.Fallback, tc.cause)
			}
			if d.Text != want.Text || d.Model != compact.ExtractiveModel {
				t.Fatalf("fallback text differs from the extractive one:\n%s", d.Text)
			}
		})
	}
}

func TestReflectorLLM(t *testing.T) {
	c := counter(t)
	s := genSession(12, 200, 20)
	obs, _ := compact.Extractive{Counter: c}.Observe(context.Background(), compact.Segment{Entries: s.Entries})
	last := s.Entries[len(s.Entries)-1].Seq
	t.Run("fits at level 0", func(t *testing.T) {
		srv := fakellm.Start()
		defer srv.Close()
		r := compact.Condenser{Summarizer: newLLM(t, srv, "anthropic", nil), Counter: c}
		d := r.Reflect(context.Background(), blocksOf(obs.Text, 1, last), 2000)
		if d.Fallback != "" || d.Level != 0 || d.TokensAfter > 2000 || d.Model == compact.ExtractiveModel {
			t.Fatalf("%+v", d)
		}
		if len(srv.Requests()) != 1 || !strings.Contains(string(srv.Requests()[0].Body), compact.MarkerReflector) {
			t.Fatal("no reflector request")
		}
	})
	t.Run("retries lower levels then falls back", func(t *testing.T) {
		var calls atomic.Int32
		srv := fakellm.Start(fakellm.WithHandler(func(fakellm.Request) fakellm.Reply {
			calls.Add(1)
			return fakellm.Reply{Text: strings.Repeat("- still long line 1\n", 70)}
		}))
		defer srv.Close()
		r := compact.Condenser{Summarizer: newLLM(t, srv, "openai", nil), Counter: c}
		d := r.Reflect(context.Background(), blocksOf(obs.Text, 1, last), 300)
		if calls.Load() != 3 || !strings.Contains(d.Fallback, "level 2") || d.TokensAfter > 300 || d.Model != compact.ExtractiveModel {
			t.Fatalf("%d calls, %+v", calls.Load(), d)
		}
	})
	t.Run("error falls back at once", func(t *testing.T) {
		srv := fakellm.Start(fakellm.WithHandler(func(fakellm.Request) fakellm.Reply { return fakellm.Reply{Status: 503} }))
		defer srv.Close()
		r := compact.Condenser{Summarizer: newLLM(t, srv, "openai", nil), Counter: c}
		d := r.Reflect(context.Background(), blocksOf(obs.Text, 1, last), 500)
		if len(srv.Requests()) != 1 || !strings.Contains(d.Fallback, "503") || d.TokensAfter > 500 {
			t.Fatalf("%+v", d)
		}
	})
}
