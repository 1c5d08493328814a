package token

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"sync"
	"testing"
)

type sample struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

func loadJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func corpus(t testing.TB) map[string]string {
	var ss []sample
	loadJSON(t, "testdata/corpus.json", &ss)
	m := make(map[string]string, len(ss))
	for _, s := range ss {
		m[s.Name] = s.Text
	}
	return m
}

// TestExactCounts checks the BPE counters against OpenAI's tiktoken
// (testdata/gen_expected.mjs) on every corpus sample.
func TestExactCounts(t *testing.T) {
	texts := corpus(t)
	var want []map[string]any
	loadJSON(t, "testdata/expected.json", &want)
	if len(want) != len(texts) || len(want) < 30 {
		t.Fatalf("expected.json has %d rows, corpus %d samples", len(want), len(texts))
	}
	for _, enc := range []string{O200kBase, Cl100kBase} {
		c, err := Get(enc)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range want {
			name := row["name"].(string)
			text, ok := texts[name]
			if !ok {
				t.Fatalf("expected.json row %q not in corpus", name)
			}
			if got, want := c.Count(text), int(row[enc].(float64)); got != want {
				t.Errorf("%s %s: got %d tokens, tiktoken says %d", enc, name, got, want)
			}
		}
	}
}

// TestEstimatorCalibration checks every estimator against its reference
// tokenizer on every corpus sample (testdata/calibrate.mjs): never fewer
// tokens, except the documented repeated_word case, which must stay within
// its stated ratio. Claude is also held to 1.30*o200k_base.
func TestEstimatorCalibration(t *testing.T) {
	texts := corpus(t)
	var rows []map[string]any
	loadJSON(t, "testdata/calibration.json", &rows)
	if len(rows) != len(texts) {
		t.Fatalf("calibration.json has %d rows, corpus %d samples", len(rows), len(texts))
	}
	excluded := map[string]string{"claude": "repeated_word", "mistral": "repeated_word"}
	for _, fam := range []string{"claude", "gemini", "llama", "qwen", "deepseek", "mistral"} {
		c, err := Get(fam)
		if err != nil {
			t.Fatal(err)
		}
		cons, _ := Get(Conservative)
		minRatio, total, refTotal := math.Inf(1), 0, 0
		for _, row := range rows {
			name := row["name"].(string)
			ref := int(row[fam].(float64))
			text := texts[name]
			got := c.Count(text)
			total += got
			refTotal += ref
			if cg := cons.Count(text); cg < got {
				t.Errorf("conservative %s: %d < %s's %d", name, cg, fam, got)
			}
			if ref == 0 {
				if got != 0 {
					t.Errorf("%s %s: %d tokens for an empty text", fam, name, got)
				}
				continue
			}
			ratio := float64(got) / float64(ref)
			if excluded[fam] == name {
				if ratio < 0.70 {
					t.Errorf("%s %s: ratio %.3f below the stated 0.70", fam, name, ratio)
				}
				continue
			}
			minRatio = min(minRatio, ratio)
			if got < ref {
				t.Errorf("%s %s: estimate %d under reference %d", fam, name, got, ref)
			}
			if fam == "claude" {
				if floor := int(math.Ceil(1.30 * row["o200k_base"].(float64))); got < floor {
					t.Errorf("claude %s: estimate %d under 1.30*o200k = %d", name, got, floor)
				}
			}
		}
		t.Logf("%-8s min ratio %.3f, total %.3f", fam, minRatio, float64(total)/float64(refTotal))
	}
}

func TestGet(t *testing.T) {
	for _, name := range Names() {
		c, err := Get(name)
		if err != nil {
			t.Errorf("Get(%q): %v", name, err)
			continue
		}
		if c.Name() != name {
			t.Errorf("Get(%q).Name() = %q", name, c.Name())
		}
		if n := c.Count(""); n != 0 {
			t.Errorf("%s: empty text counts %d", name, n)
		}
		if n := c.Count("hello world"); n < 2 {
			t.Errorf("%s: %q counts %d", name, "hello world", n)
		}
	}
	if _, err := Get("p50k_base"); !errors.Is(err, ErrUnknownTokenizer) {
		t.Errorf("Get(p50k_base): %v, want ErrUnknownTokenizer", err)
	}
}

// TestCountOddInput feeds inputs outside the corpus: invalid UTF-8, NUL
// bytes, a long whitespace run. Nothing may panic, and counts stay sane.
func TestCountOddInput(t *testing.T) {
	tests := []struct {
		name, text string
	}{
		{"invalid utf8", "abc\xff\xfe\xfddef"},
		{"lone continuation", "\x80\x80\x80"},
		{"nul bytes", "a\x00b\x00\x00c"},
		{"long blank run", spaces(100_000)},
	}
	for _, tt := range tests {
		for _, name := range Names() {
			c, _ := Get(name)
			n := c.Count(tt.text)
			if n < 1 || n > len(tt.text)*3+8 {
				t.Errorf("%s %s: %d tokens for %d bytes", name, tt.name, n, len(tt.text))
			}
		}
	}
}

func spaces(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = ' '
	}
	return string(b)
}

// TestConcurrentCount runs every counter from several goroutines (run with
// -race) and checks they agree with a sequential count.
func TestConcurrentCount(t *testing.T) {
	texts := corpus(t)
	for _, name := range Names() {
		c, _ := Get(name)
		want := map[string]int{}
		for k, s := range texts {
			want[k] = c.Count(s)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for k, s := range texts {
					if got := c.Count(s); got != want[k] {
						t.Errorf("%s %s: concurrent %d, sequential %d", name, k, got, want[k])
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestWhitespaceShapes is the differential test of the pre-tokenizers:
// every whitespace shape of testdata/whitespace.json (gen_whitespace.mjs)
// must count exactly as tiktoken counts it.
func TestWhitespaceShapes(t *testing.T) {
	var ref struct {
		Texts  []string `json:"texts"`
		O200k  []int    `json:"o200k_base"`
		Cl100k []int    `json:"cl100k_base"`
	}
	loadJSON(t, "testdata/whitespace.json", &ref)
	if len(ref.Texts) < 26_000 || len(ref.O200k) != len(ref.Texts) || len(ref.Cl100k) != len(ref.Texts) {
		t.Fatalf("whitespace.json: %d texts, %d and %d counts", len(ref.Texts), len(ref.O200k), len(ref.Cl100k))
	}
	for enc, want := range map[string][]int{O200kBase: ref.O200k, Cl100kBase: ref.Cl100k} {
		c, err := Get(enc)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i, text := range ref.Texts {
			if got := c.Count(text); got != want[i] {
				if bad++; bad <= 20 {
					t.Errorf("%s %q: got %d tokens, tiktoken says %d", enc, text, got, want[i])
				}
			}
		}
		if bad > 20 {
			t.Errorf("%s: %d texts miscounted in all", enc, bad)
		}
	}
}
