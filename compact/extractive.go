package compact

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/token"
)

// Extractive is the deterministic summarizer: no model, the same input
// always gives the same output. It keeps user messages (assertions,
// decisions, questions), the notable sentences of the assistant (those with
// identifiers, numbers, file paths, URLs, errors, decisions or questions),
// one line per tool call with the first line of its result and its error
// lines, all verbatim, in the observation format. It is the fallback of
// every other Summarizer and the default when no model is configured.
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
	nextRe     = regexp.MustCompile(`(?i)\b(next|todo|then i|i will|i'll|plan|remaining|still need)\b`)
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
		obs = fitObservations(obs, seg.MaxTokens, e.counter())
	}
	return Output{Text: Format(obs), Model: ExtractiveModel}, nil
}

// Extract turns entries into observations, one or a few per message, tool
// calls merged with their results, repeats dropped.
func Extract(entries []Entry) []Observation {
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
			add(High, "System: "+quote(keepNotable(text, userMaxRunes)))
		case m.Role == message.User && strings.TrimSpace(text) != "":
			kind, p := "User", High
			switch t := strings.TrimSpace(text); {
			case questionRe.MatchString(t):
				kind, p = "User asked", Medium
			case decisionRe.MatchString(t):
				kind = "User decided"
			}
			fact := kind + ": " + quote(keepNotable(text, userMaxRunes))
			if images > 0 {
				fact += fmt.Sprintf(" (+%d image)", images)
			}
			add(p, fact)
		case m.Role == message.User && images > 0:
			add(Medium, fmt.Sprintf("User sent %d image(s)", images))
		case m.Role == message.Assistant:
			if s := notableSentences(text, assistantMaxRunes); s != "" {
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

// keepNotable returns text whole when it fits max runes; otherwise its
// notable sentences (identifiers, numbers, decisions, questions) in order,
// whole, as many as fit.
func keepNotable(text string, max int) string {
	t := strings.Join(strings.Fields(text), " ")
	if len([]rune(t)) <= max {
		return t
	}
	if s := notableSentences(text, max); s != "" {
		return s
	}
	return clipRunes(t, max)
}

// notableSentences returns the sentences of text worth keeping, in order,
// within max runes: first those carrying facts (digits, identifiers, paths,
// URLs, errors), then those with decisions, questions or plans, as room
// allows. Repeats count once; a sentence that does not fit whole is left
// out, unless nothing else is kept.
func notableSentences(text string, max int) string {
	var all []string
	var strong []bool
	seen := map[string]bool{}
	for _, s := range sentences(text) {
		s = strings.Join(strings.Fields(s), " ")
		if s == "" || seen[s] || !notable(s) {
			continue
		}
		seen[s] = true
		all = append(all, s)
		strong = append(strong, notableRe.MatchString(s) || errorRe.MatchString(s) || hasUpperRun(s))
	}
	keep := make([]bool, len(all))
	n := 0
	for _, pass := range []bool{true, false} {
		for i, s := range all {
			if strong[i] != pass {
				continue
			}
			if r := len([]rune(s)); n+r <= max {
				keep[i] = true
				n += r + 1
			}
		}
	}
	var kept []string
	for i, s := range all {
		if keep[i] {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 && len(all) > 0 {
		kept = append(kept, clipRunes(all[0], max))
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

func notable(s string) bool {
	return notableRe.MatchString(s) || decisionRe.MatchString(s) || questionRe.MatchString(s) ||
		errorRe.MatchString(s) || doneRe.MatchString(s) || nextRe.MatchString(s) || hasUpperRun(s)
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

// fitObservations drops observations, lowest priority and oldest first,
// until their text fits max tokens.
func fitObservations(obs []Observation, max int, c token.Counter) []Observation {
	if c.Count(Format(obs)) <= max {
		return obs
	}
	cost := make([]int, len(obs))
	total := 0
	for i, o := range obs {
		cost[i] = c.Count(o.line()) + 1
		total += cost[i]
	}
	order := make([]int, len(obs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return rank(obs[a].Priority) - rank(obs[b].Priority) })
	drop := map[int]bool{}
	for _, i := range order {
		if total <= max*9/10 { // leave room for the date headers
			break
		}
		drop[i] = true
		total -= cost[i]
	}
	var out []Observation
	for i, o := range obs {
		if !drop[i] {
			out = append(out, o)
		}
	}
	return out
}

// Reflect condenses observations to r.Target tokens at detail level
// r.Level: level 0 drops low-priority lines and repeats; 1 also shortens
// every line; 2 keeps, besides the high-priority lines, only the last 20
// medium and 10 done lines; 3 and above keep the high-priority lines and the
// last 5 others, and then cuts the result, oldest lines first, to fit the
// target, so that it always fits. It never fails.
func (e Extractive) Reflect(_ context.Context, r Reflection) (Output, error) {
	lines := Parse(r.Text)
	c := e.counter()
	lines = reflectLevel(lines, r.Level)
	text := FormatLines(lines)
	if r.Level >= extractiveLevels-1 && r.Target > 0 && c.Count(text) > r.Target {
		text = fitLines(lines, r.Target, c)
	}
	return Output{Text: text, Model: ExtractiveModel}, nil
}

// extractiveLevels is how many detail levels Extractive.Reflect has; the
// last always fits its target.
const extractiveLevels = 4

func reflectLevel(lines []Line, level int) []Line {
	seen := map[string]bool{}
	var out []Line
	for _, l := range lines {
		key := l.Raw
		if l.Obs != nil {
			key = l.Obs.Fact
			if l.Obs.Priority == Low {
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
	if level >= 2 {
		keep := map[Priority]int{Medium: 20, Done: 10, "": 20}
		if level >= 3 {
			keep = map[Priority]int{Medium: 5, Done: 5, "": 5}
		}
		left := map[Priority]int{}
		for k, v := range keep {
			left[k] = v
		}
		for i := len(out) - 1; i >= 0; i-- {
			p := Priority("")
			if out[i].Obs != nil {
				p = out[i].Obs.Priority
			}
			if p == High {
				continue
			}
			if left[p] > 0 {
				left[p]--
				continue
			}
			out[i].Raw, out[i].Obs = "", nil // dropped
		}
		out = slices.DeleteFunc(out, func(l Line) bool { return l.Obs == nil && l.Raw == "" })
	}
	return out
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
