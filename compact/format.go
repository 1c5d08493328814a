package compact

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Priority ranks an observation.
type Priority string

// The priorities, from most to least binding; Done marks finished work.
const (
	High   Priority = "high"
	Medium Priority = "medium"
	Low    Priority = "low"
	Done   Priority = "done"
)

// Observation is one line of the observation format.
type Observation struct {
	At       time.Time // its date and time (UTC, minute precision)
	Priority Priority
	Fact     string
	From, To int64 // the seqs of the log range it covers
}

// Line is one line of an observation text as Parse reads it: an
// observation, or any other text (a catalogue line, a model's prose) kept
// as it is.
type Line struct {
	Date string       // the last "Date:" header seen, "" before any
	Obs  *Observation // nil for other text
	Raw  string       // the line as written
}

// Format renders observations grouped by date, in order.
func Format(obs []Observation) string {
	var b strings.Builder
	date := ""
	for _, o := range obs {
		d := o.At.UTC().Format(time.DateOnly)
		if d != date {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "Date: %s\n", d)
			date = d
		}
		b.WriteString(o.line())
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (o Observation) line() string {
	return fmt.Sprintf("- %s [%s] %s [%d–%d]", o.At.UTC().Format("15:04"), o.Priority, o.Fact, o.From, o.To)
}

var (
	dateRe = regexp.MustCompile(`^Date: (\d{4}-\d\d-\d\d)$`)
	obsRe  = regexp.MustCompile(`^- (\d\d:\d\d) \[(high|medium|low|done)\] (.*) \[(\d+)–(\d+)\]$`)
	// rangeRe finds anything written as a seq range, [12–40] or [12-40].
	rangeRe = regexp.MustCompile(`\[(\d+)\s*[–-]\s*(\d+)\]`)
)

// Parse reads an observation text line by line; it never fails: lines that
// are not in the format are kept as Raw text. Empty lines are skipped.
func Parse(text string) []Line {
	var out []Line
	date := ""
	for raw := range strings.Lines(text) {
		raw = strings.TrimRight(raw, "\r\n")
		t := strings.TrimSpace(raw)
		if t == "" {
			continue
		}
		if m := dateRe.FindStringSubmatch(t); m != nil {
			date = m[1]
			continue
		}
		l := Line{Date: date, Raw: t}
		if m := obsRe.FindStringSubmatch(t); m != nil {
			at, err := time.Parse(time.DateOnly+" 15:04", orDate(date)+" "+m[1])
			from, err1 := strconv.ParseInt(m[4], 10, 64)
			to, err2 := strconv.ParseInt(m[5], 10, 64)
			if err == nil && err1 == nil && err2 == nil {
				l.Obs = &Observation{At: at, Priority: Priority(m[2]), Fact: m[3], From: from, To: to}
			}
		}
		out = append(out, l)
	}
	return out
}

func orDate(d string) string {
	if d == "" {
		return "1970-01-01"
	}
	return d
}

// FormatLines renders parsed lines back, regrouping them by date.
func FormatLines(lines []Line) string {
	var b strings.Builder
	date := ""
	for _, l := range lines {
		if l.Date != date && l.Date != "" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "Date: %s\n", l.Date)
			date = l.Date
		}
		if l.Obs != nil {
			b.WriteString(l.Obs.line())
		} else {
			b.WriteString(l.Raw)
		}
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// quote renders user or model text as quoted data on one line: whitespace
// runs collapsed, nothing else changed (identifiers stay verbatim).
func quote(s string) string {
	return `"` + strings.Join(strings.Fields(s), " ") + `"`
}

// clipRunes cuts s to at most n runes, marking the cut.
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}
