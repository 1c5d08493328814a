package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/proxy"
)

// TestServeSettingsPrecedence: a flag beats its environment variable, which
// beats the config file, which beats the default.
func TestServeSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mneme.json")
	if err := os.WriteFile(cfg, []byte(`{"addr":"127.0.0.1:1111","budget_tokens":16000,"recall-rounds":2,"insecure":true,"policy":{"min_tail_turns":3}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MNEME_CONFIG", cfg)
	t.Setenv("MNEME_RECALL_ROUNDS", "3")
	t.Setenv("OPENAI_API_KEY", "sk-env")
	tests := []struct {
		name string
		args []string
		get  func(o serveOptions) any
		want any
	}{
		{"file over default", nil, func(o serveOptions) any { return o.addr }, "127.0.0.1:1111"},
		{"file number", nil, func(o serveOptions) any { return o.budgetTokens }, 16000},
		{"file bool", nil, func(o serveOptions) any { return o.insecure }, true},
		{"env over file", nil, func(o serveOptions) any { return o.recallRounds }, 3},
		{"flag over env", []string{"--recall-rounds", "7"}, func(o serveOptions) any { return o.recallRounds }, 7},
		{"conventional env alias", nil, func(o serveOptions) any { return o.openaiKey }, "sk-env"},
		{"default", nil, func(o serveOptions) any { return o.maxBodyMiB }, 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var o serveOptions
			c := newServeCmd(&o)
			if err := c.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := applyEnvAndFile(c.Flags()); err != nil {
				t.Fatal(err)
			}
			if v := tc.get(o); v != tc.want {
				t.Errorf("got %v, want %v", v, tc.want)
			}
			p, err := o.policy()
			if err != nil {
				t.Fatal(err)
			}
			if p.MinTailTurns != 3 || p.BudgetTokens != 16000 {
				t.Errorf("policy from the file: %+v", p)
			}
		})
	}
}

// cancelOn is a writer that cancels a context once it has seen a phrase.
type cancelOn struct {
	mu     sync.Mutex
	b      strings.Builder
	phrase string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), w.phrase) {
		w.cancel()
	}
	return len(p), nil
}

// TestServeDemo runs `mneme serve --demo` on an in-memory store: the
// window rises and falls at each compaction, then the server keeps
// serving until it is stopped, and stops cleanly.
func TestServeDemo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{phrase: "Still serving", cancel: cancel}
	o := serveOptions{}
	c := newServeCmd(&o)
	if err := c.ParseFlags([]string{"--demo", "--store", "memory:", "--addr", "127.0.0.1:0", "--demo-turns", "40"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, out, io.Discard, o) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the demo did not finish")
	}
	text := out.b.String()
	if n := strings.Count(text, "← compacted"); n < 1 {
		t.Errorf("no compaction in the demo:\n%s", text)
	}
	if n := strings.Count(text, "\ncall "); n != 40 {
		t.Errorf("%d calls printed, want 40", n)
	}
}

// TestCacheBytes: --cache-mib gives the proxy two thirds and the engine a
// third, today's sizes by default; 0 turns both off.
func TestCacheBytes(t *testing.T) {
	var o serveOptions
	if err := newServeCmd(&o).ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if px, memo := o.cacheBytes(); px != proxy.DefaultCacheBytes || memo != mneme.DefaultRequestMemoBytes {
		t.Errorf("default --cache-mib %d: proxy %d, engine %d; want %d, %d", o.cacheMiB, px, memo, proxy.DefaultCacheBytes, mneme.DefaultRequestMemoBytes)
	}
	o.cacheMiB = 0
	if px, memo := o.cacheBytes(); px >= 0 || memo >= 0 {
		t.Errorf("--cache-mib 0: proxy %d, engine %d; want both off (negative)", px, memo)
	}
}
