package mneme_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
)

// TestOutputReserveDefaults: the reply reserve comes from the model (its
// maximum output, a quarter of the window, at most 8,192), and a small
// budget_tokens shrinks it instead of leaving no room for the input.
func TestOutputReserveDefaults(t *testing.T) {
	cases := []struct {
		name    string
		model   string
		budget  int // policy budget_tokens (0: the model's window)
		reserve int // policy reserve_output_tokens (0: the default)
		usable  int
	}{
		{"8k model", "gpt-4", 0, 0, 8192 - 2048},                      // a quarter of its window
		{"128k model", "gpt-4o", 0, 0, 128_000 - 8192},                // the cap
		{"1M model", "gpt-4.1", 0, 0, 1_047_576 - 8192},               // the cap
		{"small max output", "gpt-4-turbo", 0, 0, 128_000 - 4096},     // its max output
		{"budget 8k on a 128k model", "gpt-4o", 8192, 0, 8192 - 2048}, // shrinks with the budget
		{"budget 1000", "gpt-4o", 1000, 0, 750},
		{"explicit reserve kept", "gpt-4o", 16384, 4000, 16384 - 4000},
		{"explicit reserve too large for the budget", "gpt-4o", 4000, 8192, 3000},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mneme.DefaultPolicy()
			p.Model, p.BudgetTokens, p.ReserveOutputTokens = tc.model, tc.budget, tc.reserve
			m, err := mneme.Open(ctx, mneme.Config{DSN: "memory:", Policy: &p})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			_, w, err := m.Thread("t", fmt.Sprint("r-", tc.budget)).AppendWindow(ctx, []message.Message{message.NewText(message.User, "hello")}, mneme.WindowOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if w.Usage.Budget != tc.usable {
				t.Fatalf("usable budget %d, want %d", w.Usage.Budget, tc.usable)
			}
		})
	}
}
