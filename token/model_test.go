package token

import (
	"errors"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	tab := DefaultTable()
	tests := []struct {
		model     string
		name      string
		context   int
		tokenizer string
		known     bool
	}{
		{"gpt-4o", "gpt-4o", 128_000, O200kBase, true},
		{"gpt-4o-2024-08-06", "gpt-4o", 128_000, O200kBase, true},
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini", 128_000, O200kBase, true},
		{"GPT-4O-MINI", "gpt-4o-mini", 128_000, O200kBase, true},
		{"openai/gpt-4.1-mini", "gpt-4.1", 1_047_576, O200kBase, true},
		{"gpt-5-mini", "gpt-5", 400_000, O200kBase, true},
		{"gpt-5-chat-latest", "gpt-5-chat", 128_000, O200kBase, true},
		{"o3-mini-2025-01-31", "o3-mini", 200_000, O200kBase, true},
		{"o4-mini", "o4-mini", 200_000, O200kBase, true},
		{"o1-mini", "o1-mini", 128_000, O200kBase, true},
		{"gpt-4-turbo-2024-04-09", "gpt-4-turbo", 128_000, Cl100kBase, true},
		{"gpt-4-0613", "gpt-4", 8_192, Cl100kBase, true},
		{"gpt-3.5-turbo-0125", "gpt-3.5-turbo", 16_385, Cl100kBase, true},
		{"ft:gpt-4o-mini-2024-07-18:acme::abc123", "gpt-4o-mini", 128_000, O200kBase, true},
		{"claude-sonnet-4-20250514", "claude-sonnet-4", 200_000, "claude", true},
		{"anthropic/claude-opus-4-1", "claude-opus-4", 200_000, "claude", true},
		{"claude-3-7-sonnet-latest", "claude-3-7-sonnet", 200_000, "claude", true},
		{"claude-3-5-haiku-20241022", "claude-3-5-haiku", 200_000, "claude", true},
		{"claude-haiku-4-5", "claude-haiku-4", 200_000, "claude", true},
		{"us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4", 200_000, "claude", true},
		{"models/gemini-2.5-pro", "gemini-2.5-pro", 1_048_576, "gemini", true},
		{"gemini-2.5-flash-lite", "gemini-2.5-flash", 1_048_576, "gemini", true},
		{"deepseek-chat", "deepseek-chat", 128_000, "deepseek", true},
		{"deepseek/deepseek-reasoner", "deepseek-reasoner", 128_000, "deepseek", true},
		{"qwen/qwen3-235b-a22b", "qwen3", 131_072, "qwen", true},
		{"Qwen2.5-Coder-32B-Instruct", "qwen2.5", 131_072, "qwen", true},
		{"meta-llama/llama-3.3-70b-instruct", "llama-3.3", 131_072, "llama", true},
		{"llama3.1:8b", "llama3.1", 131_072, "llama", true},
		{"mistral-large-latest", "mistral-large", 131_072, "mistral", true},
		{"mistralai/mixtral-8x7b-instruct", "mixtral", 32_768, "mistral", true},
		{"my-private-model", "my-private-model", 128_000, Conservative, false},
		{"", "", 128_000, Conservative, false},
	}
	for _, tt := range tests {
		m, known := tab.Lookup(tt.model)
		if m.Name != tt.name || m.Context != tt.context || m.Tokenizer != tt.tokenizer || known != tt.known {
			t.Errorf("Lookup(%q) = %+v, %v; want name %q context %d tokenizer %q known %v",
				tt.model, m, known, tt.name, tt.context, tt.tokenizer, tt.known)
		}
	}
}

// TestDefaultTableSane checks every built-in entry: a tokenizer Get knows,
// an output limit below the window.
func TestDefaultTableSane(t *testing.T) {
	ms := DefaultTable().Models()
	if len(ms) < 40 {
		t.Fatalf("only %d models", len(ms))
	}
	for _, m := range ms {
		if _, err := Get(m.Tokenizer); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		if m.Context <= 0 || m.MaxOutput <= 0 || m.MaxOutput >= m.Context {
			t.Errorf("%s: context %d, max output %d", m.Name, m.Context, m.MaxOutput)
		}
		if got, _ := DefaultTable().Lookup(m.Name); got != m {
			t.Errorf("Lookup(%q) = %+v, want its own entry %+v", m.Name, got, m)
		}
	}
}

func TestSet(t *testing.T) {
	tab := DefaultTable()
	if err := tab.Set(Model{Prefix: "gpt-4o", Context: 64_000}); err != nil {
		t.Fatal(err)
	}
	m, _ := tab.Lookup("gpt-4o-2024-11-20")
	if m.Context != 64_000 || m.MaxOutput != 16_384 || m.Tokenizer != O200kBase {
		t.Errorf("partial override: %+v", m)
	}
	if m, _ := tab.Lookup("gpt-4o-mini"); m.Context != 128_000 {
		t.Errorf("override of gpt-4o leaked into gpt-4o-mini: %+v", m)
	}
	if err := tab.Set(Model{Name: "acme-7b", Context: 32_000, MaxOutput: 2_000, Tokenizer: "llama"}); err != nil {
		t.Fatal(err)
	}
	if m, known := tab.Lookup("ACME-7B-chat"); !known || m.Tokenizer != "llama" {
		t.Errorf("new entry: %+v %v", m, known)
	}
	var zero Table
	if err := zero.Set(Model{Name: "x", Context: 10, MaxOutput: 1, Tokenizer: O200kBase}); err != nil {
		t.Fatalf("zero Table: %v", err)
	}
	bad := []Model{
		{},
		{Name: "x", Context: 100, MaxOutput: 10, Tokenizer: "nope"},
		{Name: "x", Context: 100, MaxOutput: 100, Tokenizer: O200kBase},
		{Name: "x", Context: -1, MaxOutput: 10, Tokenizer: O200kBase},
	}
	for _, m := range bad {
		if err := tab.Set(m); !errors.Is(err, ErrInvalidModel) {
			t.Errorf("Set(%+v) = %v, want ErrInvalidModel", m, err)
		}
	}
}

func TestLoadJSON(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		wantErr bool
		model   string
		context int
	}{
		{"override", `[{"prefix":"claude-sonnet-4","context":1000000}]`, false, "claude-sonnet-4-5", 1_000_000},
		{"new", `[{"name":"local","prefix":"local-","context":8192,"max_output":1024,"tokenizer":"qwen"}]`, false, "local-13b", 8192},
		{"unknown field", `[{"name":"x","contxt":5}]`, true, "gpt-4o", 128_000},
		{"bad entry keeps table", `[{"prefix":"gpt-4o","context":1000},{"name":"y","tokenizer":"bogus"}]`, true, "gpt-4o", 128_000},
		{"not json", `{`, true, "gpt-4o", 128_000},
		{"object not array", `{"name":"x"}`, true, "gpt-4o", 128_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := DefaultTable()
			err := tab.LoadJSON(strings.NewReader(tt.config))
			if (err != nil) != tt.wantErr {
				t.Fatalf("LoadJSON: %v, wantErr %v", err, tt.wantErr)
			}
			if m, _ := tab.Lookup(tt.model); m.Context != tt.context {
				t.Errorf("after load, %s context %d, want %d", tt.model, m.Context, tt.context)
			}
		})
	}
}

func FuzzLookup(f *testing.F) {
	for _, s := range []string{"gpt-4o", "openai/gpt-4o", "us.anthropic.claude-3", "", "/", "ft:", "models/gemini"} {
		f.Add(s)
	}
	tab := DefaultTable()
	f.Fuzz(func(t *testing.T, s string) {
		m, known := tab.Lookup(s)
		if m.Context <= 0 || m.Tokenizer == "" {
			t.Fatalf("Lookup(%q) = %+v, %v", s, m, known)
		}
	})
}

func TestOutputReserve(t *testing.T) {
	tab := DefaultTable()
	cases := []struct {
		model   string
		context int
		want    int
	}{
		{"gpt-4", 8192, 2048},
		{"gpt-4o", 128_000, 8192},
		{"gpt-4.1", 1_047_576, 8192},
		{"gpt-4-turbo", 128_000, 4096},
		{"gpt-4o", 2000, 500},
		{"gpt-4o", 0, 0},
	}
	for _, tc := range cases {
		m, _ := tab.Lookup(tc.model)
		if got := m.OutputReserve(tc.context); got != tc.want {
			t.Errorf("%s in %d: reserve %d, want %d", tc.model, tc.context, got, tc.want)
		}
	}
}
