package salience

import (
	"slices"
	"testing"
)

func TestTerms(t *testing.T) {
	got := Terms("Reading src/pkg/file_12.go: the Retry wrapper, 504s!")
	want := []string{"reading", "src", "pkg", "file", "12", "retry", "wrapper", "504"}
	if !slices.Equal(got, want) {
		t.Fatalf("Terms = %q, want %q", got, want)
	}
}

// TestRareBeatsCommon: among lines that share a template, the one with
// terms of its own scores highest, whatever its position; numbers alone do
// not make a line salient.
func TestRareBeatsCommon(t *testing.T) {
	var lines []string
	for i := range 30 {
		lines = append(lines, "assistant: Reading src/pkg/file_"+string(rune('0'+i%10))+"1.go; tools: read_file")
	}
	finding := "assistant: Root cause: the retry wrapper in billing resends the charge after a gateway timeout"
	lines = slices.Insert(lines, 7, finding)
	c := NewCorpus(lines)
	best := 0
	for i, l := range lines {
		if c.Score(l) > c.Score(lines[best]) {
			best = i
		}
	}
	if lines[best] != finding {
		t.Fatalf("best line %q, want the finding", lines[best])
	}
	if c.Score("ids 4471 9921 3382 1187") >= c.Score("Caroline adopted a dog named Oscar") {
		t.Fatal("a run of numbers outscores a sentence with names")
	}
}
