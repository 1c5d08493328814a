package compact

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/mnemehq/mneme/internal/salience"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/token"
)

// Extractive is the deterministic summarizer: no model, the same input
// always gives the same output. It keeps both speakers: each user and
// assistant message whole when it is short, else its most informative
// sentences (package salience: rare terms, names, numbers, findings and
// decisions score high); one line per tool call with the first line of its
// result and its error lines, all verbatim, in the observation format. When
// the observations do not fit their bound, the least informative lines of
// the lowest priority leave first, wherever they are in the range, and a
// closing line says how many left and which seqs they covered. It is the
// fallback of every other Summarizer and the default when no model is
// configured.
type Extractive struct {
	// Counter measures outputs against their bounds; nil: the
	// conservative estimator.
	Counter token.Counter
}

// Caps on what one message contributes, in runes.
const (
	userMaxRunes      = 1200
	assistantMaxRunes = 600
	argsMaxRunes      = 120
	resultLineRunes   = 160
	errorLineRunes    = 200
	maxErrorLines     = 4
)

var (
	// notableRe: a digit, an identifier (snake_case, camelCase, a.b,
	// f(), ABC-123), a path or a URL.
	notableRe  = regexp.MustCompile(`\d|[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]*|[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*|[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*\(\)|[A-Za-z0-9_.~-]*/[A-Za-z0-9_.-]+|https?://`)
	decisionRe = regexp.MustCompile(`(?i)\b(decid\w*|decision|let's|let us|we will|we'll|go with|use|don't|do not|must|never|always|prefer\w*|instead|should|switch\w*|stop)\b`)
	questionRe = regexp.MustCompile(`\?\s*$`)
	doneRe     = regexp.MustCompile(`(?i)\b(done|fixed|completed?|resolved|merged|all tests pass\w*|tests? pass\w*|finished)\b`)
	errorRe    = regexp.MustCompile(`(?i)(\w*error\b|\bfail(ed|ure)?\b|\bpanic\b|\bexception\b|\bfatal\b|\btraceback\b|\bdenied\b)[^\n]{0,2}?[:\[!]|^\s*(--- )?FAIL\b|\bexit (status|code) [1-9]`)
)

func (e Extractive) counter() token.Counter {
	if e.Counter != nil {
		return e.Counter
	}
	c, err := token.Get(token.Conservative)
	if err != nil {
		return runeCounter{}
	}
	return c
}

// runeCounter is the last resort: a token per three bytes, rounded up.
type runeCounter struct{}

func (runeCounter) Name() string       { return "bytes/3" }
func (runeCounter) Count(s string) int { return (len(s) + 2) / 3 }

// Observe writes observations for seg. It never fails.
func (e Extractive) Observe(_ context.Context, seg Segment) (Output, error) {
	obs := Extract(seg.Entries)
	if seg.MaxTokens > 0 {
		var dropped []Observation
		obs, dropped = fitObservations(obs, seg.MaxTokens, e.counter())
		if len(dropped) > 0 {
			var rs []seqRange
			for _, o := range dropped {
				rs = append(rs, seqRange{o.From, o.To})
			}
			return Output{Text: Format(obs) + "\n" + omittedNote(len(dropped), rs), Model: ExtractiveModel}, nil
		}
	}
	return Output{Text: Format(obs), Model: ExtractiveModel}, nil
}

// Extract turns entries into observations, one or a few per message, tool
// calls merged with their results, repeats dropped.
func Extract(entries []Entry) []Observation {
	var texts []string
	for _, en := range entries {
		if en.Msg != nil {
			texts = append(texts, sentences(en.Msg.TextOf())...)
		}
	}
	corpus := salience.NewCorpus(texts)
	var obs []Observation
	calls := map[string]int{} // call id -> index in obs
	for _, en := range entries {
		m := en.Msg
		if m == nil {
			continue
		}
		at := en.At.UTC().Truncate(time.Minute)
		add := func(p Priority, fact string) int {
			obs = append(obs, Observation{At: at, Priority: p, Fact: fact, From: en.Seq, To: en.Seq})
			return len(obs) - 1
		}
		text := m.TextOf()
		images := 0
		for _, p := range m.Parts {
			if p.Type == message.Image {
				images++
			}
		}
		switch {
		case m.Role == message.System && strings.TrimSpace(text) != "":
			add(High, "System: "+quote(keepSalient(text, userMaxRunes, corpus)))
		case m.Role == message.User && strings.TrimSpace(text) != "":
			kind, p := "User", High
			switch t := strings.TrimSpace(text); {
			case questionRe.MatchString(t):
				kind, p = "User asked", Medium
			case decisionRe.MatchString(t):
				kind = "User decided"
			}
			fact := kind + ": " + quote(keepSalient(text, userMaxRunes, corpus))
			if images > 0 {
				fact += fmt.Sprintf(" (+%d image)", images)
			}
			add(p, fact)
		case m.Role == message.User && images > 0:
			add(Medium, fmt.Sprintf("User sent %d image(s)", images))
		case m.Role == message.Assistant:
			if s := keepSalient(informative(text), assistantMaxRunes, corpus); s != "" {
				p := Medium
				if doneRe.MatchString(s) && !errorRe.MatchString(s) {
					p = Done
				}
				add(p, "Assistant: "+quote(s))
			}
		}
		for _, p := range m.Parts {
			switch p.Type {
			case message.ToolCall:
				args := strings.Join(strings.Fields(p.Arguments), " ")
				fact := p.ToolName
				if args != "" && args != "{}" {
					fact += " " + clipRunes(args, argsMaxRunes)
				}
				calls[p.ToolCallID] = add(Low, fact)
			case message.ToolResult:
				sum, isErr := resultSummary(p)
				i, ok := calls[p.ToolCallID]
				if !ok {
					name := p.ToolName
					if name == "" {
						name = "tool"
					}
					i = add(Medium, name+" result")
				}
				o := &obs[i]
				o.Fact += " → " + sum
				o.To = en.Seq
				if o.Priority == Low {
					o.Priority = Medium
				}
				if isErr {
					o.Priority = High
				}
			}
		}
	}
	// Repeats (the same call with the same result) add nothing.
	seen := map[string]bool{}
	return slices.DeleteFunc(obs, func(o Observation) bool {
		if seen[o.Fact] {
			return true
		}
		seen[o.Fact] = true
		return false
	})
}

// resultSummary is a tool result in one line: its size, first line and
// error lines, verbatim.
func resultSummary(p message.Part) (string, bool) {
	var b strings.Builder
	for _, c := range p.Content {
		switch c.Type {
		case message.Text:
			b.WriteString(c.Text)
			b.WriteByte('\n')
		case message.Image:
			b.WriteString("[image]\n")
		}
	}
	body := strings.TrimSpace(b.String())
	if body == "" {
		if p.IsError {
			return "error (no text)", true
		}
		return "(empty)", false
	}
	lines := strings.Split(body, "\n")
	first := ""
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			first = l
			break
		}
	}
	var errs []string
	seen := map[string]bool{}
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || l == first || seen[l] || !errorRe.MatchString(l) {
			continue
		}
		seen[l] = true
		errs = append(errs, quote(clipRunes(l, errorLineRunes)))
		if len(errs) == maxErrorLines {
			break
		}
	}
	isErr := p.IsError || errorRe.MatchString(first) || len(errs) > 0
	var s string
	if len(lines) == 1 {
		s = quote(clipRunes(first, errorLineRunes))
	} else {
		s = fmt.Sprintf("%d lines: %s", len(lines), quote(clipRunes(first, resultLineRunes)))
	}
	if p.IsError {
		s = "error: " + s
	}
	if len(errs) > 0 {
		s += "; errors: " + strings.Join(errs, " | ")
	}
	return s, isErr
}

// informative drops the sentences of text that carry nothing (pleasantries:
// fewer than two terms once stopwords are gone, and no identifier, number,
// error, decision or result), keeping the rest in order: the assistant's
// side of a conversation stays, its chatter does not.
func informative(text string) string {
	var kept []string
	for _, s := range sentences(text) {
		s = strings.Join(strings.Fields(s), " ")
		if s == "" {
			continue
		}
		if len(salience.Terms(s)) >= 2 || notableRe.MatchString(s) || errorRe.MatchString(s) ||
			decisionRe.MatchString(s) || doneRe.MatchString(s) || hasUpperRun(s) {
			kept = append(kept, s)
		}
	}
	return strings.Join(kept, " ")
}

// keepSalient returns text whole when it fits max runes; otherwise its
// most informative sentences (by the corpus of the range being observed),
// whole, in their order, as many as fit: what a message says that the rest
// of the range does not, not only its sentences with digits. Repeats count
// once; a sentence that does not fit whole is left out, unless nothing else
// is kept.
func keepSalient(text string, max int, corpus *salience.Corpus) string {
	t := strings.Join(strings.Fields(text), " ")
	if t == "" || len([]rune(t)) <= max {
		return t
	}
	var all []string
	seen := map[string]bool{}
	for _, s := range sentences(text) {
		s = strings.Join(strings.Fields(s), " ")
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		all = append(all, s)
	}
	order := make([]int, len(all))
	score := make([]float64, len(all))
	for i, s := range all {
		order[i] = i
		score[i] = corpus.Score(s)
		if errorRe.MatchString(s) || hasUpperRun(s) || notableRe.MatchString(s) {
			score[i] += 1
		}
	}
	slices.SortStableFunc(order, byScore(score))
	keep := make([]bool, len(all))
	n := 0
	for _, i := range order {
		if r := len([]rune(all[i])); n+r <= max {
			keep[i] = true
			n += r + 1
		}
	}
	var kept []string
	for i, s := range all {
		if keep[i] {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 && len(all) > 0 {
		kept = append(kept, clipRunes(all[order[0]], max))
	}
	return strings.Join(kept, " ")
}

// sentences splits text after ., ! or ? followed by a space, and at line
// ends; "ci.example.com" or "0.07" stay whole.
func sentences(text string) []string {
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		end := c == '\n' || ((c == '.' || c == '!' || c == '?') && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\n' || text[i+1] == '\t'))
		if end {
			out = append(out, text[start:i+1])
			start = i + 1
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// hasUpperRun spots acronyms and constants (API, HTTP_PROXY) that carry
// meaning even without digits.
func hasUpperRun(s string) bool {
	run := 0
	for _, r := range s {
		if unicode.IsUpper(r) {
			run++
			if run >= 3 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// rank orders priorities for dropping: the first dropped comes first.
func rank(p Priority) int {
	switch p {
	case Low:
		return 0
	case Medium:
		return 1
	case Done:
		return 2
	}
	return 3
}

// fitObservations drops observations, lowest priority and least
// informative first (wherever they are in the range), until their text fits
// max tokens with room for the note that names what left; it returns the
// kept and the dropped, each in order.
func fitObservations(obs []Observation, max int, c token.Counter) (kept, dropped []Observation) {
	if c.Count(Format(obs)) <= max {
		return obs, nil
	}
	facts := make([]string, len(obs))
	for i, o := range obs {
		facts[i] = o.Fact
	}
	corpus := salience.NewCorpus(facts)
	cost := make([]int, len(obs))
	score := make([]float64, len(obs))
	total := 0
	for i, o := range obs {
		cost[i] = c.Count(o.line()) + 1
		score[i] = corpus.Score(o.Fact)
		total += cost[i]
	}
	order := make([]int, len(obs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if d := rank(obs[a].Priority) - rank(obs[b].Priority); d != 0 {
			return d
		}
		switch {
		case score[a] < score[b]:
			return -1
		case score[a] > score[b]:
			return 1
		}
		return 0
	})
	drop := map[int]bool{}
	room := max*9/10 - 40 // the date headers and the omitted note
	for _, i := range order {
		if total <= room {
			break
		}
		drop[i] = true
		total -= cost[i]
	}
	for i, o := range obs {
		if drop[i] {
			dropped = append(dropped, o)
		} else {
			kept = append(kept, o)
		}
	}
	return kept, dropped
}

// seqRange is a range of the log, both ends included.
type seqRange struct{ from, to int64 }

// maxNoteRanges bounds the ranges an omitted note spells out.
const maxNoteRanges = 6

// omittedPrefix starts the note that says what a memory text left out.
const omittedPrefix = "- omitted: "

// omittedNote says how many lines left and which seqs they covered, merged
// into ranges (the first few spelled out), so that the memory block claims
// only what it carries: the rest is in the archive.
func omittedNote(n int, rs []seqRange) string {
	slices.SortFunc(rs, func(a, b seqRange) int {
		if a.from != b.from {
			return int(a.from - b.from)
		}
		return int(a.to - b.to)
	})
	var merged []seqRange
	for _, r := range rs {
		if k := len(merged) - 1; k >= 0 && r.from <= merged[k].to+1 {
			merged[k].to = max(merged[k].to, r.to)
			continue
		}
		merged = append(merged, r)
	}
	var parts []string
	for _, r := range merged[:min(len(merged), maxNoteRanges)] {
		parts = append(parts, fmt.Sprintf("%d–%d", r.from, r.to))
	}
	more := ""
	if len(merged) > maxNoteRanges {
		more = fmt.Sprintf(" and %d more ranges", len(merged)-maxNoteRanges)
	}
	return fmt.Sprintf("%s%d lines, of seq %s%s (not carried here: mneme_search finds them, mneme_read reads them back)", omittedPrefix, n, strings.Join(parts, ", "), more)
}

// noteRe reads an omitted note back: its count and ranges.
var noteRe = regexp.MustCompile(`(\d+)–(\d+)`)

// Reflect condenses observations to r.Target tokens at detail level
// r.Level: level 0 drops low-priority lines and repeats; 1 also shortens
// every line; 2 and above shorten lines further and, when still over the
// target, keep the most informative lines (package salience), the
// high-priority ones first, chosen in turn from every stretch of the
// covered range so that the memory spreads over it rather than keeping the
// newest, as many as fill the target; the last level cuts what is left to
// fit, so that it always fits. Whatever leaves (low-priority or unchosen
// lines, and what earlier notes said had left) is named by a closing
// omitted note. It never fails.
func (e Extractive) Reflect(_ context.Context, r Reflection) (Output, error) {
	c := e.counter()
	var omitted int
	var rs []seqRange
	var lines []Line
	for _, l := range Parse(r.Text) {
		if l.Obs == nil && strings.HasPrefix(l.Raw, omittedPrefix) {
			n, nr := parseNote(l.Raw)
			omitted += n
			rs = append(rs, nr...)
			continue
		}
		lines = append(lines, l)
	}
	lines, low := reflectLevel(lines, r.Level)
	drop := func(ls []Line) {
		for _, l := range ls {
			if f, t, ok := lineRange(l); ok {
				omitted++
				rs = append(rs, seqRange{f, t})
			}
		}
	}
	drop(low)
	note := func() string {
		if omitted == 0 {
			return ""
		}
		return "\n" + omittedNote(omitted, slices.Clone(rs))
	}
	text := FormatLines(lines) + note()
	if r.Level >= 2 && r.Target > 0 && c.Count(text) > r.Target {
		var left []Line
		lines, left = selectLines(lines, r.Target-c.Count(omittedNote(omitted+len(lines), append(slices.Clone(rs), seqRange{r.From, r.To})))-2, c)
		drop(left)
		text = FormatLines(lines) + note()
	}
	if r.Level >= extractiveLevels-1 && r.Target > 0 && c.Count(text) > r.Target {
		text = fitLines(lines, r.Target, c)
	}
	return Output{Text: text, Model: ExtractiveModel}, nil
}

// parseNote reads an omitted note's count and ranges.
func parseNote(raw string) (int, []seqRange) {
	rest := strings.TrimPrefix(raw, omittedPrefix)
	n := 0
	fmt.Sscanf(rest, "%d", &n)
	var rs []seqRange
	for _, m := range noteRe.FindAllStringSubmatch(rest, -1) {
		a, err1 := strconv.ParseInt(m[1], 10, 64)
		b, err2 := strconv.ParseInt(m[2], 10, 64)
		if err1 == nil && err2 == nil && a <= b {
			rs = append(rs, seqRange{a, b})
		}
	}
	return n, rs
}

// catRangeRe reads a catalogue line's range.
var catRangeRe = regexp.MustCompile(`^- \[seq (\d+)–(\d+)\]`)

// lineRange is the log range a line covers: an observation's, or a
// catalogue line's; ok is false for other text.
func lineRange(l Line) (from, to int64, ok bool) {
	if l.Obs != nil {
		return l.Obs.From, l.Obs.To, true
	}
	if m := catRangeRe.FindStringSubmatch(l.Raw); m != nil {
		a, err1 := strconv.ParseInt(m[1], 10, 64)
		b, err2 := strconv.ParseInt(m[2], 10, 64)
		return a, b, err1 == nil && err2 == nil
	}
	return 0, 0, false
}

// extractiveLevels is how many detail levels Extractive.Reflect has; the
// last always fits its target.
const extractiveLevels = 4

// reflectLevel drops repeats and (returned apart) low-priority lines, and
// shortens lines from level 1 on.
func reflectLevel(lines []Line, level int) (out, low []Line) {
	seen := map[string]bool{}
	for _, l := range lines {
		key := l.Raw
		if l.Obs != nil {
			key = l.Obs.Fact
			if l.Obs.Priority == Low {
				low = append(low, l)
				continue
			}
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, l)
	}
	if level >= 1 {
		n := 240
		if level >= 2 {
			n = 200
		}
		if level >= 3 {
			n = 160
		}
		for i := range out {
			if out[i].Obs != nil {
				o := *out[i].Obs
				o.Fact = clipRunes(o.Fact, n)
				out[i].Obs = &o
			} else {
				out[i].Raw = clipRunes(out[i].Raw, n)
			}
		}
	}
	return out, low
}

// spreadBuckets: the stretches of the range selectLines takes turns over.
const spreadBuckets = 8

// selectLines keeps, in order, the lines that fill max tokens: the
// high-priority ones first, then the rest; within each, in turns over
// spreadBuckets stretches of the range, each stretch's most informative
// line not yet kept. It returns the kept and the left lines, in order.
func selectLines(lines []Line, max int, c token.Counter) (kept, left []Line) {
	n := len(lines)
	texts := make([]string, n)
	cost := make([]int, n)
	for i, l := range lines {
		texts[i] = render(l)
		cost[i] = c.Count(texts[i]) + 1
	}
	corpus := salience.NewCorpus(texts)
	score := make([]float64, n)
	for i := range lines {
		score[i] = corpus.Score(texts[i])
	}
	room := max * 9 / 10 // date headers
	used := 0
	chosen := make([]bool, n)
	for _, high := range []bool{true, false} {
		lists := make([][]int, spreadBuckets)
		for i, l := range lines {
			if (l.Obs != nil && l.Obs.Priority == High) == high {
				b := i * spreadBuckets / n
				lists[b] = append(lists[b], i)
			}
		}
		for _, l := range lists {
			slices.SortStableFunc(l, byScore(score))
		}
		for progress := true; progress; {
			progress = false
			for b := range lists {
				for len(lists[b]) > 0 {
					i := lists[b][0]
					lists[b] = lists[b][1:]
					if used+cost[i] <= room {
						chosen[i], used, progress = true, used+cost[i], true
						break
					}
				}
			}
		}
	}
	for i, l := range lines {
		if chosen[i] {
			kept = append(kept, l)
		} else {
			left = append(left, l)
		}
	}
	return kept, left
}

// fitLines keeps the most recent lines whose text fits max tokens; a
// single line over max is cut.
func fitLines(lines []Line, max int, c token.Counter) string {
	total := 0
	start := len(lines)
	for start > 0 {
		n := c.Count(render(lines[start-1])) + 1
		if lines[start-1].Date != "" && (start == len(lines) || lines[start].Date != lines[start-1].Date) {
			n += 8 // a date header
		}
		if total+n > max {
			break
		}
		total += n
		start--
	}
	if start < len(lines) {
		return FormatLines(lines[start:])
	}
	if len(lines) == 0 {
		return ""
	}
	// Not even the last line fits: cut it.
	if max < 1 {
		return ""
	}
	s := render(lines[len(lines)-1])
	for len(s) > 0 && c.Count(s) > max {
		if len([]rune(s)) <= 2 {
			return ""
		}
		s = clipRunes(s, len([]rune(s))*3/4)
	}
	return s
}

func render(l Line) string {
	if l.Obs != nil {
		return l.Obs.line()
	}
	return l.Raw
}

// byScore orders indices by their score, highest first.
func byScore(score []float64) func(a, b int) int {
	return func(a, b int) int { return cmp.Compare(score[b], score[a]) }
}
