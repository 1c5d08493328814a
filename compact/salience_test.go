package compact_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/message"
)

var noteRe = regexp.MustCompile(`^- omitted: (\d+) lines, of seq `)

// omitted returns the count an omitted note gives, or -1 without a note.
func omitted(t *testing.T, text string) int {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if m := noteRe.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return -1
}

// TestObservationClaimsWhatItCarries: an observation bounded below what
// its range says keeps whole lines and closes with a note that counts every
// line it left out; unbounded, it carries everything and has no note.
func TestObservationClaimsWhatItCarries(t *testing.T) {
	c := counter(t)
	s := genSession(9, 120, 20)
	all := compact.Extract(s.Entries)
	seg := compact.Segment{From: 1, To: s.Entries[len(s.Entries)-1].Seq, Entries: s.Entries}
	full, _ := compact.Extractive{Counter: c}.Observe(context.Background(), seg)
	if n := omitted(t, full.Text); n != -1 {
		t.Fatalf("an unbounded observation says it omitted %d lines", n)
	}
	seg.MaxTokens = c.Count(full.Text) / 4
	o, _ := compact.Extractive{Counter: c}.Observe(context.Background(), seg)
	if n := c.Count(o.Text); n > seg.MaxTokens {
		t.Fatalf("%d tokens for a bound of %d", n, seg.MaxTokens)
	}
	kept := 0
	for _, l := range compact.Parse(o.Text) {
		if l.Obs != nil {
			kept++
		}
	}
	if got := omitted(t, o.Text); kept == 0 || got != len(all)-kept {
		t.Fatalf("kept %d of %d lines; the note says %d omitted:\n%s", kept, len(all), got, o.Text)
	}
}

// TestBothSpeakersKept: the assistant's side of a conversation is kept
// when it carries something, even without a digit or an identifier; its
// pleasantries are not.
func TestBothSpeakersKept(t *testing.T) {
	at := time.Date(2023, 5, 8, 13, 56, 0, 0, time.UTC)
	en := []compact.Entry{
		{Seq: 1, At: at, Msg: ptr(message.NewText(message.User, "Caroline: I went to a support group yesterday and it was so powerful."))},
		{Seq: 2, At: at, Msg: ptr(message.NewText(message.Assistant, "Melanie: Wow, that's cool! I painted a sunset with my kids at the lake last weekend."))},
	}
	o, _ := compact.Extractive{}.Observe(context.Background(), compact.Segment{From: 1, To: 2, Entries: en})
	for _, want := range []string{"support group yesterday", "I painted a sunset with my kids at the lake last weekend."} {
		if !strings.Contains(o.Text, want) {
			t.Errorf("missing %q:\n%s", want, o.Text)
		}
	}
	if strings.Contains(o.Text, "that's cool") {
		t.Errorf("a pleasantry is kept:\n%s", o.Text)
	}
}

func ptr(m message.Message) *message.Message { return &m }

// TestReflectionSpreadsAndClaims: condensing 400 catalogue and observation
// lines over seq 1–2000 into a tenth of their size keeps lines from every
// stretch of the range (not only the newest), keeps the lines that carry
// something of their own (wherever they are) over the template ones, and
// counts what it left out.
func TestReflectionSpreadsAndClaims(t *testing.T) {
	c := counter(t)
	facts := map[int]string{23: "Root cause: the retry wrapper in billing resends the charge after a gateway timeout",
		151: "Decided with Dana to pin the schema migration behind feature flag ledger_v2",
		333: "Customer Oksana prefers invoices in Ukrainian hryvnia from March on"}
	var b strings.Builder
	b.WriteString("Date: 2026-03-02\n")
	for i := range 400 {
		from := int64(i*5 + 1)
		fact := fmt.Sprintf("Step %d: reading src/pkg%d/file_%d.go", i, i%7, i)
		if f, ok := facts[i]; ok {
			fact = f
		}
		if i%2 == 0 {
			fmt.Fprintf(&b, "- [seq %d–%d] m_%06d assistant: %q; tools: read_file (m_%06d)\n", from, from+4, from, fact, from+1)
		} else {
			fmt.Fprintf(&b, "- 10:%02d [medium] Assistant: %q [%d–%d]\n", i%60, fact, from, from+4)
		}
	}
	text := strings.TrimSuffix(b.String(), "\n")
	target := c.Count(text) / 10
	d := (&compact.Condenser{Counter: c}).Reflect(context.Background(), blocksOf(text, 1, 2000), target)
	if d.TokensAfter > target {
		t.Fatalf("%d tokens for a target of %d", d.TokensAfter, target)
	}
	if d.TokensAfter < target*6/10 {
		t.Errorf("%d tokens for a target of %d: the reflection does not fill its share", d.TokensAfter, target)
	}
	for _, f := range facts {
		if !strings.Contains(d.Text, f) {
			t.Errorf("lost %q", f)
		}
	}
	stretch := map[int64]bool{}
	kept := 0
	for _, l := range compact.Parse(d.Text) {
		var from int64
		switch {
		case l.Obs != nil:
			from = l.Obs.From
		case strings.HasPrefix(l.Raw, "- [seq "):
			fmt.Sscanf(l.Raw, "- [seq %d", &from)
		default:
			continue
		}
		kept++
		stretch[(from-1)/250] = true
	}
	if len(stretch) != 8 {
		t.Errorf("kept lines come from %d of the range's 8 stretches:\n%s", len(stretch), d.Text)
	}
	if got := omitted(t, d.Text); got != 400-kept {
		t.Errorf("kept %d of 400 lines; the note says %d omitted", kept, got)
	}
}
