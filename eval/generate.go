package eval

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/mnemehq/mneme/message"
)

// The session profiles the generator knows.
const (
	ProfileCoding        = "coding"        // file reads, greps, test runs, edits
	ProfileObservability = "observability" // large span and log dumps
	ProfileSupport       = "support"       // user facts, preferences, changes of mind
	ProfileResearch      = "research"      // web searches and pages
)

// Profiles lists the generator's profiles.
var Profiles = []string{ProfileCoding, ProfileObservability, ProfileSupport, ProfileResearch}

// Session is a generated long session: the messages of each turn (what is
// appended before one model call) and the facts planted along it.
type Session struct {
	Profile string
	Seed    uint64
	// Turns[0] holds the system prompt and the goal.
	Turns [][]message.Message
	Facts []Fact
}

// Fact is a planted fact and the probe that asks for it at the end.
type Fact struct {
	Key   string `json:"key"`   // the identifier the probe searches for
	Kind  string `json:"kind"`  // id, number, decision, preference
	Value string `json:"value"` // the text that must be available (key and value)
	// Old is the value it superseded ("" if none): an old value available
	// without the new one is a superseded-fact error.
	Old      string `json:"old,omitempty"`
	Turn     int    `json:"turn"`     // the turn that planted (or last changed) it
	Question string `json:"question"` // the probe question
	Probe    string `json:"probe"`    // the archive search a model would run for it
}

// Generate returns the session of a profile: turns model calls, seeded,
// the same for the same arguments. It plants about one fact every 15
// turns (ids, numbers, decisions, preferences), and supersedes some of
// them later on (a change of mind, a new value).
func Generate(profile string, turns int, seed uint64) (*Session, error) {
	if !slices.Contains(Profiles, profile) {
		return nil, fmt.Errorf("unknown profile %q (known: %s)", profile, strings.Join(Profiles, ", "))
	}
	if turns < 2 {
		return nil, fmt.Errorf("turns must be at least 2")
	}
	g := &generator{r: rand.New(rand.NewPCG(seed, uint64(len(profile))*0x9e3779b97f4a7c15)), profile: profile}
	s := &Session{Profile: profile, Seed: seed}
	s.Turns = append(s.Turns, []message.Message{
		message.NewText(message.System, systemPrompts[profile]),
		message.NewText(message.User, goals[profile]),
	})
	plantEvery := 15
	var planted []int // indexes into s.Facts that may be superseded
	for t := 1; t < turns; t++ {
		var msgs []message.Message
		switch {
		case t%plantEvery == 7 && t < turns-10:
			f := g.fact(len(s.Facts), t)
			s.Facts = append(s.Facts, f)
			planted = append(planted, len(s.Facts)-1)
			msgs = g.plant(f, t)
		case t%plantEvery == 12 && len(planted) > 2 && t < turns-5 && g.r.IntN(3) == 0:
			i := planted[g.r.IntN(len(planted)-1)] // never the one just planted
			planted = slices.DeleteFunc(planted, func(j int) bool { return j == i })
			f := &s.Facts[i]
			f.Old, f.Value, f.Turn = f.Value, f.Key+"="+g.value(f.Kind), t
			msgs = g.supersede(*f, t)
		default:
			msgs = g.step(t)
		}
		s.Turns = append(s.Turns, msgs)
	}
	return s, nil
}

var systemPrompts = map[string]string{
	ProfileCoding:        "You are a coding agent working in a Go monorepo. Use the tools to read, search, test and edit code. Keep changes minimal and explain each step briefly.",
	ProfileObservability: "You are an observability agent. Use the tools to query traces, spans and logs, and find the root cause of incidents. Quote the evidence you rely on.",
	ProfileSupport:       "You are a customer support agent for an online shop. Be concise and friendly; use the CRM tools to look up orders and remember what the customer tells you.",
	ProfileResearch:      "You are a research agent. Search the web, read pages and keep notes with sources; the final answer is a short report with citations.",
}

var goals = map[string]string{
	ProfileCoding:        "Goal: make the checkout service's payment retries idempotent (ticket PAY-1207) without changing the public API. Run the tests after every edit.",
	ProfileObservability: "Goal: find why p99 latency of the checkout API doubled since Monday's deploy (incident INC-3390) and propose a fix.",
	ProfileSupport:       "Hi, I need help with my recent orders and my account settings.",
	ProfileResearch:      "Goal: write a comparison of open-source vector databases for our retrieval team (request RQ-4410): performance, operations, licensing.",
}

type generator struct {
	r       *rand.Rand
	profile string
	call    int
}

func (g *generator) id() string {
	g.call++
	return fmt.Sprintf("call_%04d", g.call)
}

// Filler vocabularies: chosen so that no fact key or value can occur in them.
var (
	pkgs   = []string{"cart", "order", "billing", "ledger", "gateway", "session", "catalog", "invoice", "stock", "pricing"}
	verbs  = []string{"Load", "Save", "Apply", "Compute", "Validate", "Render", "Merge", "Parse", "Flush", "Resolve"}
	nouns  = []string{"Total", "Line", "Tax", "Discount", "Batch", "Entry", "Cursor", "Window", "Record", "Quote"}
	words  = []string{"the", "service", "request", "latency", "cache", "index", "query", "result", "value", "page", "model", "system", "update", "error", "handler", "client", "server", "table", "record", "stream", "batch", "shard", "replica", "node", "budget", "report"}
	spansS = []string{"checkout", "cart", "auth", "inventory", "pricing", "search", "recommend", "shipping"}
)

func (g *generator) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g *generator) sentence(n int) string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = g.pick(words)
	}
	ws[0] = strings.ToUpper(ws[0][:1]) + ws[0][1:]
	return strings.Join(ws, " ") + "."
}

func (g *generator) codeLines(path string, n int) string {
	var b strings.Builder
	pkg := g.pick(pkgs)
	fmt.Fprintf(&b, "// %s\npackage %s\n", path, pkg)
	for i := 0; i < n; i++ {
		switch g.r.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "func (s *%sService) %s%s(ctx context.Context, id int64) (*%s, error) {\n", strings.ToUpper(pkg[:1])+pkg[1:], g.pick(verbs), g.pick(nouns), g.pick(nouns))
		case 1:
			fmt.Fprintf(&b, "\tif err := s.store.%s(ctx, id); err != nil {\n\t\treturn nil, fmt.Errorf(\"%s %s: %%w\", err)\n\t}\n", g.pick(verbs), strings.ToLower(g.pick(verbs)), strings.ToLower(g.pick(nouns)))
		case 2:
			fmt.Fprintf(&b, "\t%s := s.%s%s(ctx, %d)\n", strings.ToLower(g.pick(nouns)), strings.ToLower(g.pick(verbs)), g.pick(nouns), g.r.IntN(500))
		default:
			fmt.Fprintf(&b, "\t// %s\n", g.sentence(6+g.r.IntN(6)))
		}
	}
	return b.String()
}

func (g *generator) path() string {
	return fmt.Sprintf("services/%s/%s_%s.go", g.pick(pkgs), strings.ToLower(g.pick(verbs)), strings.ToLower(g.pick(nouns)))
}

// step is one ordinary turn of the profile: a tool call and its result,
// now and then a short exchange with the user.
func (g *generator) step(t int) []message.Message {
	switch g.profile {
	case ProfileCoding:
		return g.codingStep(t)
	case ProfileObservability:
		return g.obsStep(t)
	case ProfileSupport:
		return g.supportStep(t)
	default:
		return g.researchStep(t)
	}
}

func (g *generator) tool(text, name, args, result string) []message.Message {
	id := g.id()
	return []message.Message{
		message.NewToolCalls(text, message.Part{ToolCallID: id, ToolName: name, Arguments: args}),
		message.NewToolResult(id, result),
	}
}

func (g *generator) codingStep(t int) []message.Message {
	if t%20 == 0 {
		return []message.Message{message.NewText(message.User, "Status? "+g.sentence(8)), message.NewText(message.Assistant, g.sentence(14)+" "+g.sentence(10))}
	}
	switch n := g.r.IntN(20); {
	case n < 2: // two files read in parallel
		p, q := g.path(), g.path()
		a, b := g.id(), g.id()
		return []message.Message{
			message.NewToolCalls("Reading both files.",
				message.Part{ToolCallID: a, ToolName: "read_file", Arguments: fmt.Sprintf(`{"path":%q}`, p)},
				message.Part{ToolCallID: b, ToolName: "read_file", Arguments: fmt.Sprintf(`{"path":%q}`, q)}),
			message.NewToolResult(a, g.codeLines(p, 30+g.r.IntN(60))),
			message.NewToolResult(b, g.codeLines(q, 30+g.r.IntN(60))),
		}
	case n < 8:
		p := g.path()
		return g.tool("Reading "+p+".", "read_file", fmt.Sprintf(`{"path":%q}`, p), g.codeLines(p, 40+g.r.IntN(100)))
	case n < 12:
		var b strings.Builder
		for i, k := 0, 4+g.r.IntN(30); i < k; i++ {
			fmt.Fprintf(&b, "%s:%d:\t%s := s.%s%s(ctx, id)\n", g.path(), 10+g.r.IntN(400), strings.ToLower(g.pick(nouns)), strings.ToLower(g.pick(verbs)), g.pick(nouns))
		}
		return g.tool("Searching.", "grep", fmt.Sprintf(`{"pattern":"%s%s"}`, g.pick(verbs), g.pick(nouns)), b.String())
	case n < 16:
		var b strings.Builder
		for i, k := 0, 10+g.r.IntN(40); i < k; i++ {
			fmt.Fprintf(&b, "--- PASS: Test%s%s (0.%02ds)\n", g.pick(verbs), g.pick(nouns), g.r.IntN(100))
		}
		fmt.Fprintf(&b, "ok  \tservices/%s\t%d.%03ds\n", g.pick(pkgs), g.r.IntN(4), g.r.IntN(1000))
		return g.tool("Running the tests.", "run_tests", fmt.Sprintf(`{"pkg":"./services/%s/..."}`, g.pick(pkgs)), b.String())
	default:
		p := g.path()
		return g.tool("Editing "+p+".", "edit_file", fmt.Sprintf(`{"path":%q,"old":"%s","new":"%s"}`, p, g.pick(verbs), g.pick(verbs)), fmt.Sprintf("edited %s: 1 hunk, +%d -%d", p, 1+g.r.IntN(9), g.r.IntN(6)))
	}
}

func (g *generator) obsStep(t int) []message.Message {
	if t%25 == 0 {
		return []message.Message{message.NewText(message.User, "Anything yet? "+g.sentence(6)), message.NewText(message.Assistant, g.sentence(16))}
	}
	if g.r.IntN(3) == 0 {
		var b strings.Builder
		for i, k := 0, 20+g.r.IntN(40); i < k; i++ {
			fmt.Fprintf(&b, "%s level=info svc=%s msg=%q\n", fmt.Sprintf("2026-03-%02dT%02d:%02d:%02dZ", 9+t/60, g.r.IntN(24), g.r.IntN(60), g.r.IntN(60)), g.pick(spansS), g.sentence(5))
		}
		return g.tool("Querying logs.", "query_logs", fmt.Sprintf(`{"svc":%q}`, g.pick(spansS)), b.String())
	}
	var b strings.Builder
	for i, k := 0, 40+g.r.IntN(160); i < k; i++ {
		fmt.Fprintf(&b, "span %016x parent=%016x svc=%s op=%s%s dur_ms=%d status=ok\n", g.r.Uint64(), g.r.Uint64(), g.pick(spansS), g.pick(verbs), g.pick(nouns), g.r.IntN(900))
	}
	return g.tool("Fetching a trace.", "get_trace", fmt.Sprintf(`{"svc":%q,"limit":200}`, g.pick(spansS)), b.String())
}

func (g *generator) supportStep(t int) []message.Message {
	if g.r.IntN(3) == 0 {
		order := fmt.Sprintf("order %d", 100000+g.r.IntN(900000))
		var b strings.Builder
		for i, k := 0, 5+g.r.IntN(20); i < k; i++ {
			fmt.Fprintf(&b, "%s event %d: %s\n", order, i, g.sentence(7))
		}
		return g.tool("Looking that up.", "crm_lookup", fmt.Sprintf(`{"q":%q}`, order), b.String())
	}
	return []message.Message{
		message.NewText(message.User, g.sentence(6+g.r.IntN(14))+" "+g.sentence(5)),
		message.NewText(message.Assistant, g.sentence(10+g.r.IntN(25))+" "+g.sentence(8+g.r.IntN(10))),
	}
}

func (g *generator) researchStep(t int) []message.Message {
	if g.r.IntN(3) == 0 {
		var b strings.Builder
		for i := 0; i < 8; i++ {
			fmt.Fprintf(&b, "%d. https://example.org/%s/%d: %s\n", i+1, g.pick(words), g.r.IntN(99999), g.sentence(10))
		}
		return g.tool("Searching the web.", "web_search", fmt.Sprintf(`{"q":"%s %s"}`, g.pick(words), g.pick(words)), b.String())
	}
	var b strings.Builder
	for i, k := 0, 10+g.r.IntN(40); i < k; i++ {
		b.WriteString(g.sentence(12+g.r.IntN(12)) + " " + g.sentence(10) + "\n\n")
	}
	return g.tool("Reading the page.", "fetch_page", fmt.Sprintf(`{"url":"https://example.org/%s/%d"}`, g.pick(words), g.r.IntN(99999)), b.String())
}

// Fact material: keys and values no filler can produce.
var factKinds = []string{"id", "number", "decision", "preference"}

func (g *generator) fact(i, t int) Fact {
	kind := factKinds[i%len(factKinds)]
	key := fmt.Sprintf("%s_%s_%02d", factPrefix[kind], strings.ToUpper(g.pick(pkgs)), i)
	return Fact{
		Key: key, Kind: kind, Value: key + "=" + g.value(kind), Turn: t,
		Question: fmt.Sprintf("What is the current %s (%s)?", strings.ReplaceAll(strings.ToLower(factPrefix[kind]), "_", " "), key),
		Probe:    key,
	}
}

var factPrefix = map[string]string{"id": "TICKET", "number": "LIMIT", "decision": "DECISION", "preference": "PREF"}

func (g *generator) value(kind string) string {
	switch kind {
	case "id":
		return fmt.Sprintf("ZX-%05d", g.r.IntN(100000))
	case "number":
		return fmt.Sprintf("%d", 1000+g.r.IntN(90000))
	case "decision":
		return []string{"postgres16", "sqlite-wal", "redis7", "kafka-3", "nats-js", "s3-archive"}[g.r.IntN(6)] + fmt.Sprintf("-q%d", g.r.IntN(100))
	default:
		return []string{"tabs", "dark-mode", "email-only", "weekly-digest", "metric-units", "utc-times"}[g.r.IntN(6)] + fmt.Sprintf("-v%d", g.r.IntN(100))
	}
}

// plant writes a fact into the session where the profile would carry it:
// a user message (support, decisions, preferences) or a tool result.
func (g *generator) plant(f Fact, t int) []message.Message {
	switch {
	case g.profile == ProfileSupport || f.Kind == "preference":
		return []message.Message{
			message.NewText(message.User, fmt.Sprintf("Please remember this: %s. %s", f.Value, g.sentence(8))),
			message.NewText(message.Assistant, "Noted. "+g.sentence(9)),
		}
	case f.Kind == "decision":
		return []message.Message{
			message.NewText(message.User, fmt.Sprintf("We decided: %s. %s", f.Value, g.sentence(6))),
			message.NewText(message.Assistant, "Understood, I will follow that decision. "+g.sentence(8)),
		}
	default:
		msgs := g.step(t)
		for i := range msgs {
			if msgs[i].IsToolResult() {
				body := msgs[i].ToolResults()[0].Content[0].Text
				lines := strings.SplitAfter(body, "\n")
				at := len(lines) / 2
				lines = slices.Insert(lines, at, fmt.Sprintf("config: %s  # set by ops\n", f.Value))
				msgs[i] = message.NewToolResult(msgs[i].ResultIDs()[0], strings.Join(lines, ""))
				return msgs
			}
		}
		return append(msgs, message.NewText(message.User, "For the record: "+f.Value+"."))
	}
}

// supersede changes a planted fact: the user changes their mind.
func (g *generator) supersede(f Fact, t int) []message.Message {
	return []message.Message{
		message.NewText(message.User, fmt.Sprintf("Change of plan: %s now (it was %s before). %s", f.Value, strings.TrimPrefix(f.Old, f.Key+"="), g.sentence(5))),
		message.NewText(message.Assistant, "Updated. "+g.sentence(8)),
	}
}
