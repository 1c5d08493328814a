package token

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
)

// Model is what Mneme needs to know of a model to budget its window.
type Model struct {
	// Name is the model family's canonical name, for display and logs.
	Name string `json:"name"`
	// Prefix is matched against model names: the longest prefix that
	// starts a (normalised, lower-case) model name wins. Empty means Name.
	Prefix string `json:"prefix,omitempty"`
	// Context is the context window in tokens, input and output together.
	Context int `json:"context"`
	// MaxOutput is the most tokens the model may generate in one reply.
	MaxOutput int `json:"max_output"`
	// Tokenizer names the Counter to count with (see Get).
	Tokenizer string `json:"tokenizer"`
}

// Unknown is what Lookup returns (with known=false) for a model no entry
// matches: a 128k window (what most current models offer at least), a 4k
// output reserve, and the Conservative counter, which takes the largest
// estimate of every known family, because the tokenizer is anybody's guess.
var Unknown = Model{Name: "unknown", Context: 128_000, MaxOutput: 4_096, Tokenizer: Conservative}

// ErrInvalidModel is returned by Set's checks (through LoadJSON) for an
// entry that cannot be used.
var ErrInvalidModel = errors.New("token: invalid model entry")

// Table maps model names to Models. It is safe for concurrent use; the
// zero value is an empty table.
type Table struct {
	mu     sync.RWMutex
	models map[string]Model // by lower-case prefix
}

// NewTable returns an empty table: every Lookup answers Unknown.
func NewTable() *Table { return &Table{models: map[string]Model{}} }

// DefaultTable returns a new table of the models Mneme knows out of the box.
// Context and output figures are the providers' published limits; the
// tokenizer is the exact encoding for OpenAI models and the calibrated
// estimator of the family otherwise.
func DefaultTable() *Table {
	t := NewTable()
	for _, m := range defaultModels {
		t.set(m)
	}
	return t
}

// The built-in entries. A more specific prefix overrides a shorter one.
var defaultModels = []Model{
	// OpenAI.
	{Name: "gpt-5", Context: 400_000, MaxOutput: 128_000, Tokenizer: O200kBase},
	{Name: "gpt-5-chat", Context: 128_000, MaxOutput: 16_384, Tokenizer: O200kBase},
	{Name: "gpt-4.1", Context: 1_047_576, MaxOutput: 32_768, Tokenizer: O200kBase},
	{Name: "gpt-4o", Context: 128_000, MaxOutput: 16_384, Tokenizer: O200kBase},
	{Name: "gpt-4o-mini", Context: 128_000, MaxOutput: 16_384, Tokenizer: O200kBase},
	{Name: "chatgpt-4o", Context: 128_000, MaxOutput: 16_384, Tokenizer: O200kBase},
	{Name: "gpt-4.5", Context: 128_000, MaxOutput: 16_384, Tokenizer: O200kBase},
	{Name: "gpt-4-turbo", Context: 128_000, MaxOutput: 4_096, Tokenizer: Cl100kBase},
	{Name: "gpt-4-1106", Context: 128_000, MaxOutput: 4_096, Tokenizer: Cl100kBase},
	{Name: "gpt-4-0125", Context: 128_000, MaxOutput: 4_096, Tokenizer: Cl100kBase},
	{Name: "gpt-4-32k", Context: 32_768, MaxOutput: 4_096, Tokenizer: Cl100kBase},
	{Name: "gpt-4", Context: 8_192, MaxOutput: 4_096, Tokenizer: Cl100kBase},
	{Name: "gpt-3.5-turbo", Context: 16_385, MaxOutput: 4_096, Tokenizer: Cl100kBase},
	{Name: "gpt-35-turbo", Context: 16_385, MaxOutput: 4_096, Tokenizer: Cl100kBase},
	{Name: "gpt-oss", Context: 131_072, MaxOutput: 32_768, Tokenizer: O200kBase},
	{Name: "o1", Context: 200_000, MaxOutput: 100_000, Tokenizer: O200kBase},
	{Name: "o1-mini", Context: 128_000, MaxOutput: 65_536, Tokenizer: O200kBase},
	{Name: "o1-preview", Context: 128_000, MaxOutput: 32_768, Tokenizer: O200kBase},
	{Name: "o3", Context: 200_000, MaxOutput: 100_000, Tokenizer: O200kBase},
	{Name: "o3-mini", Context: 200_000, MaxOutput: 100_000, Tokenizer: O200kBase},
	{Name: "o4-mini", Context: 200_000, MaxOutput: 100_000, Tokenizer: O200kBase},

	// Anthropic.
	{Name: "claude-opus-4", Context: 200_000, MaxOutput: 32_000, Tokenizer: "claude"},
	{Name: "claude-opus-4-5", Context: 200_000, MaxOutput: 64_000, Tokenizer: "claude"},
	{Name: "claude-sonnet-4", Context: 200_000, MaxOutput: 64_000, Tokenizer: "claude"},
	{Name: "claude-haiku-4", Context: 200_000, MaxOutput: 64_000, Tokenizer: "claude"},
	{Name: "claude-3-7-sonnet", Context: 200_000, MaxOutput: 64_000, Tokenizer: "claude"},
	{Name: "claude-3-5-sonnet", Context: 200_000, MaxOutput: 8_192, Tokenizer: "claude"},
	{Name: "claude-3-5-haiku", Context: 200_000, MaxOutput: 8_192, Tokenizer: "claude"},
	{Name: "claude-3-opus", Context: 200_000, MaxOutput: 4_096, Tokenizer: "claude"},
	{Name: "claude-3-haiku", Context: 200_000, MaxOutput: 4_096, Tokenizer: "claude"},
	{Name: "claude-2", Context: 100_000, MaxOutput: 4_096, Tokenizer: "claude"},
	{Name: "claude-2.1", Context: 200_000, MaxOutput: 4_096, Tokenizer: "claude"},
	{Name: "claude-instant", Context: 100_000, MaxOutput: 4_096, Tokenizer: "claude"},
	{Name: "claude", Context: 200_000, MaxOutput: 8_192, Tokenizer: "claude"},

	// Google.
	{Name: "gemini-2.5-pro", Context: 1_048_576, MaxOutput: 65_536, Tokenizer: "gemini"},
	{Name: "gemini-2.5-flash", Context: 1_048_576, MaxOutput: 65_536, Tokenizer: "gemini"},
	{Name: "gemini-2.0-flash", Context: 1_048_576, MaxOutput: 8_192, Tokenizer: "gemini"},
	{Name: "gemini-1.5-pro", Context: 2_097_152, MaxOutput: 8_192, Tokenizer: "gemini"},
	{Name: "gemini-1.5-flash", Context: 1_048_576, MaxOutput: 8_192, Tokenizer: "gemini"},
	{Name: "gemini", Context: 1_048_576, MaxOutput: 8_192, Tokenizer: "gemini"},
	{Name: "gemma-3", Context: 131_072, MaxOutput: 8_192, Tokenizer: "gemini"},
	{Name: "gemma3", Context: 131_072, MaxOutput: 8_192, Tokenizer: "gemini"},
	{Name: "gemma", Context: 8_192, MaxOutput: 4_096, Tokenizer: "gemini"},

	// DeepSeek.
	{Name: "deepseek-chat", Context: 128_000, MaxOutput: 8_192, Tokenizer: "deepseek"},
	{Name: "deepseek-reasoner", Context: 128_000, MaxOutput: 65_536, Tokenizer: "deepseek"},
	{Name: "deepseek", Context: 128_000, MaxOutput: 8_192, Tokenizer: "deepseek"},

	// Qwen.
	{Name: "qwen3", Context: 131_072, MaxOutput: 32_768, Tokenizer: "qwen"},
	{Name: "qwen2.5", Context: 131_072, MaxOutput: 8_192, Tokenizer: "qwen"},
	{Name: "qwen-max", Context: 32_768, MaxOutput: 8_192, Tokenizer: "qwen"},
	{Name: "qwen-plus", Context: 131_072, MaxOutput: 8_192, Tokenizer: "qwen"},
	{Name: "qwen-turbo", Context: 1_000_000, MaxOutput: 8_192, Tokenizer: "qwen"},
	{Name: "qwen", Context: 32_768, MaxOutput: 8_192, Tokenizer: "qwen"},
	{Name: "qwq", Context: 131_072, MaxOutput: 32_768, Tokenizer: "qwen"},

	// Meta Llama (hyphenated API names and Ollama's "llama3.1").
	{Name: "llama-3.1", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama-3.2", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama-3.3", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama-3", Context: 8_192, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama3.1", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama3.2", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama3.3", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama3", Context: 8_192, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "llama-4", Context: 1_048_576, MaxOutput: 8_192, Tokenizer: Conservative},
	{Name: "meta-llama-3.1", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},
	{Name: "meta-llama-3.3", Context: 131_072, MaxOutput: 4_096, Tokenizer: "llama"},

	// Mistral.
	{Name: "mistral-large", Context: 131_072, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "mistral-medium", Context: 131_072, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "mistral-small", Context: 32_768, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "mistral-nemo", Context: 131_072, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "mistral", Context: 32_768, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "open-mistral-nemo", Context: 131_072, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "ministral", Context: 131_072, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "mixtral", Context: 32_768, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "codestral", Context: 262_144, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "magistral", Context: 40_000, MaxOutput: 32_000, Tokenizer: "mistral"},
	{Name: "devstral", Context: 131_072, MaxOutput: 8_192, Tokenizer: "mistral"},
	{Name: "pixtral", Context: 131_072, MaxOutput: 8_192, Tokenizer: "mistral"},
}

// MaxDefaultReserve caps the output reserve chosen for a model: replies
// longer than this are rare enough that a larger reserve only wastes window.
const MaxDefaultReserve = 8192

// OutputReserve is the default number of tokens kept free for the reply in
// a context window of contextTokens (the model's own, or a smaller
// budget_tokens): the smallest of the model's maximum output, a quarter of
// the window and MaxDefaultReserve. A quarter of the window bounds it so a
// small window or budget shrinks the reserve instead of leaving no room for
// the input.
func (m Model) OutputReserve(contextTokens int) int {
	r := min(contextTokens/4, MaxDefaultReserve)
	if m.MaxOutput > 0 {
		r = min(r, m.MaxOutput)
	}
	return max(r, 0)
}

// Lookup returns the model for a model name as a client sends it. Matching
// is case-insensitive, ignores a provider prefix ("openai/gpt-4o",
// "models/gemini-2.5-pro", Bedrock's "us.anthropic.claude-...", a
// fine-tune's "ft:") and takes the longest matching prefix, so
// "gpt-4o-mini-2024-07-18" finds gpt-4o-mini. A name nothing matches gets
// Unknown (with its Name set to the name asked) and known=false, so the
// caller can warn.
func (t *Table) Lookup(model string) (m Model, known bool) {
	key := normalise(model)
	t.mu.RLock()
	defer t.mu.RUnlock()
	best := -1
	for p, cand := range t.models {
		if len(p) > best && strings.HasPrefix(key, p) {
			m, best = cand, len(p)
		}
	}
	if best < 0 {
		m = Unknown
		m.Name = model
		return m, false
	}
	return m, true
}

// vendorDot matches the vendor prefix of Bedrock model ids, with or without
// a region ("us.anthropic.", "meta.", "eu.mistral.").
var vendorDot = regexp.MustCompile(`^(?:[a-z]{2,4}\.)?(?:anthropic|meta|mistral|amazon|deepseek|qwen|google|openai|cohere|ai21)\.`)

func normalise(model string) string {
	s := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimPrefix(s, "ft:")
	return vendorDot.ReplaceAllString(s, "")
}

// Set adds m to the table, replacing the entry with the same prefix. An
// entry's zero fields (MaxOutput, Tokenizer, Context) are taken from what
// the table answered for that prefix before, so a config may override the
// context window alone. It reports ErrInvalidModel for an entry without a
// name and prefix, with an unknown tokenizer, or with limits that do not
// fit (MaxOutput at least Context).
func (t *Table) Set(m Model) error {
	if m.Prefix == "" {
		m.Prefix = m.Name
	}
	if normalise(m.Prefix) == "" {
		return fmt.Errorf("%w: no name or prefix", ErrInvalidModel)
	}
	prev, _ := t.Lookup(m.Prefix)
	if m.Name == "" {
		m.Name = m.Prefix
	}
	if m.Context == 0 {
		m.Context = prev.Context
	}
	if m.MaxOutput == 0 {
		m.MaxOutput = prev.MaxOutput
	}
	if m.Tokenizer == "" {
		m.Tokenizer = prev.Tokenizer
	}
	if _, err := Get(m.Tokenizer); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidModel, m.Prefix, err)
	}
	if m.Context < 0 || m.MaxOutput < 0 || m.MaxOutput >= m.Context {
		return fmt.Errorf("%w %q: context %d, max output %d", ErrInvalidModel, m.Prefix, m.Context, m.MaxOutput)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.set(m)
	return nil
}

func (t *Table) set(m Model) {
	if t.models == nil {
		t.models = map[string]Model{}
	}
	if m.Prefix == "" {
		m.Prefix = m.Name
	}
	t.models[normalise(m.Prefix)] = m
}

// Models returns the table's entries, in no particular order.
func (t *Table) Models() []Model {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Model, 0, len(t.models))
	for _, m := range t.models {
		out = append(out, m)
	}
	return out
}

// LoadJSON reads a config file of overrides, a JSON array of Model objects
//
//	[{"name": "my-llama", "prefix": "llama-3.3-70b-ft", "context": 65536, "tokenizer": "llama"},
//	 {"prefix": "gpt-4o", "context": 64000}]
//
// and Sets each in order. Nothing is applied if any entry is invalid.
func (t *Table) LoadJSON(r io.Reader) error {
	var ms []Model
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ms); err != nil {
		return fmt.Errorf("token: model table config: %w", err)
	}
	// Apply to a copy first so that a bad entry leaves t untouched.
	t.mu.Lock()
	defer t.mu.Unlock()
	trial := &Table{models: make(map[string]Model, len(t.models)+len(ms))}
	for k, v := range t.models {
		trial.models[k] = v
	}
	for i, m := range ms {
		if err := trial.Set(m); err != nil {
			return fmt.Errorf("token: model table config entry %d: %w", i, err)
		}
	}
	t.models = trial.models
	return nil
}
