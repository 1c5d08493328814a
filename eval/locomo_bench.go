package eval

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/sync/errgroup"
	_ "modernc.org/sqlite" // the fts5 baseline's own SQLite

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// The LoCoMo bench: each conversation is replayed turn by turn through the
// engine (speaker A as the user, B as the assistant, the speaker's name in
// the text, the session's date as the message's time); then every question
// of categories 1–4 is asked as the next user turn on a branch that is never
// kept (Thread.PreviewHistory) and the window the model would see is checked
// for the question's evidence turns. Beside Mneme, in the same run and at
// the same budget: last-n (the latest turns that fit) and fts5 (a plain
// SQLite FTS5 BM25 search with stopwords dropped; its top 10 turns, then
// the latest turns in what is left of the budget).

// LoCoMo bench methods besides Mneme's strategies ("mneme-<strategy>").
const (
	LoCoMoLastN = "last-n"
	LoCoMoFTS5  = "fts5"
)

// LoCoMoConfig configures LoCoMoBench. Zero fields take the defaults.
type LoCoMoConfig struct {
	// Dir holds the conversations (*.json).
	Dir string
	// Budgets are context windows in tokens (default 8192 and 16384);
	// each is the policy's budget_tokens, its output reserve the default.
	Budgets []int
	// Model names the tokenizer (default gpt-4o).
	Model string
	// Strategies are Mneme's strategies to run (default: the default
	// policy's).
	Strategies []window.Strategy
	// Policy is merged over the default policy for Mneme's rows (JSON, as
	// in fixtures): to measure other knobs than the defaults.
	Policy string
	// Progress, when set, gets one line per conversation and budget.
	Progress io.Writer
}

// LoCoMoRow is one line of the report: a method at a budget on a category.
type LoCoMoRow struct {
	Method       string `json:"method"`
	Default      bool   `json:"default"`
	BudgetTokens int    `json:"budget_tokens"`
	Category     string `json:"category"`
	Questions    int    `json:"questions"`
	// EvidenceAvailable is the share of the questions' evidence turns
	// present in the window (raw, or verbatim in the memory or recalled
	// block).
	EvidenceAvailable float64 `json:"evidence_available"`
	// Search figures over the whole conversation, the question as query,
	// averaged over questions: the share of its evidence turns in the top
	// 10, whether any is, and the reciprocal rank of the first. Null for
	// last-n, which does not search.
	SearchRecallAt10 *float64 `json:"search_recall_at_10"`
	SearchHitAt10    *float64 `json:"search_hit_at_10"`
	SearchMRRAt10    *float64 `json:"search_mrr_at_10"`
}

// LoCoMoReport is a whole run.
type LoCoMoReport struct {
	Conversations []string    `json:"conversations"`
	Model         string      `json:"model"`
	Rows          []LoCoMoRow `json:"rows"`
	Seconds       float64     `json:"seconds"`
}

// locomoCategories are the categories asked, in report order.
var locomoCategories = []int{LoCoMoMultiHop, LoCoMoTemporal, LoCoMoOpenDomain, LoCoMoSingleHop}

// tally sums one method's results at one budget, by category (0 = all).
type tally map[int]*tallyCell

type tallyCell struct {
	questions, evidence, present int
	searched                     int
	recall, hit, mrr             float64
}

func (t tally) add(cat, evidence, present int, s *searchScore) {
	for _, c := range []int{0, cat} {
		cell := t[c]
		if cell == nil {
			cell = &tallyCell{}
			t[c] = cell
		}
		cell.questions++
		cell.evidence += evidence
		cell.present += present
		if s != nil {
			cell.searched++
			cell.recall += s.recall
			cell.hit += s.hit
			cell.mrr += s.mrr
		}
	}
}

// merge adds o's cells to t's.
func (t tally) merge(o tally) {
	for _, c := range append([]int{0}, locomoCategories...) {
		oc := o[c]
		if oc == nil {
			continue
		}
		cell := t[c]
		if cell == nil {
			cell = &tallyCell{}
			t[c] = cell
		}
		cell.questions += oc.questions
		cell.evidence += oc.evidence
		cell.present += oc.present
		cell.searched += oc.searched
		cell.recall += oc.recall
		cell.hit += oc.hit
		cell.mrr += oc.mrr
	}
}

type searchScore struct{ recall, hit, mrr float64 }

// scoreRanking scores a ranking of dia ids against the evidence, at 10.
func scoreRanking(ranked []string, evidence []string) *searchScore {
	s := &searchScore{}
	found := 0
	for i, d := range ranked[:min(10, len(ranked))] {
		if slices.Contains(evidence, d) {
			found++
			if s.mrr == 0 {
				s.mrr = 1 / float64(i+1)
			}
		}
	}
	s.recall = float64(found) / float64(len(evidence))
	if found > 0 {
		s.hit = 1
	}
	return s
}

// LoCoMoBench runs the bench.
func LoCoMoBench(ctx context.Context, cfg LoCoMoConfig) (*LoCoMoReport, error) {
	start := time.Now()
	if len(cfg.Budgets) == 0 {
		cfg.Budgets = []int{8192, 16384}
	}
	if cfg.Model == "" {
		cfg.Model = "gpt-4o"
	}
	def := window.DefaultPolicy().Strategy
	if len(cfg.Strategies) == 0 {
		cfg.Strategies = []window.Strategy{def}
	}
	convs, err := LoadLoCoMo(cfg.Dir)
	if err != nil {
		return nil, err
	}
	mod, _ := token.DefaultTable().Lookup(cfg.Model)
	counter, err := token.Get(mod.Tokenizer)
	if err != nil {
		return nil, err
	}
	methods := []string{}
	for _, s := range cfg.Strategies {
		methods = append(methods, "mneme-"+string(s))
	}
	methods = append(methods, LoCoMoLastN, LoCoMoFTS5)
	var progressMu sync.Mutex
	rep := &LoCoMoReport{Model: cfg.Model}
	for _, c := range convs {
		rep.Conversations = append(rep.Conversations, c.ID)
	}
	// Each conversation at each budget is a job of its own, on as many
	// cores as the process has; their tallies are summed in a fixed order,
	// so the report is the same whatever order they finish in.
	type job struct {
		c       *LoCoMoConversation
		budget  int
		tallies map[string]tally
	}
	var jobs []*job
	for _, c := range convs {
		for _, b := range cfg.Budgets {
			j := &job{c: c, budget: b, tallies: map[string]tally{}}
			for _, m := range methods {
				j.tallies[m] = tally{}
			}
			jobs = append(jobs, j)
		}
	}
	run := func(ctx context.Context, j *job) error {
		lines := locomoLines(j.c)
		fts, err := newFTS5(ctx, lines)
		if err != nil {
			return err
		}
		defer fts.Close()
		usable := j.budget - mod.OutputReserve(j.budget)
		for _, s := range cfg.Strategies {
			if err := runLoCoMoMneme(ctx, j.c, lines, cfg.Model, cfg.Policy, j.budget, s, j.tallies["mneme-"+string(s)]); err != nil {
				return fmt.Errorf("conversation %s, budget %d, %s: %w", j.c.ID, j.budget, s, err)
			}
		}
		if err := runLoCoMoBaselines(ctx, j.c, lines, counter, usable, fts, j.tallies[LoCoMoLastN], j.tallies[LoCoMoFTS5]); err != nil {
			return err
		}
		if cfg.Progress != nil {
			progressMu.Lock()
			fmt.Fprintf(cfg.Progress, "locomo: conversation %s (%d turns, %d questions), budget %d: done at %.1fs\n", j.c.ID, len(lines.turns), countAsked(j.c), j.budget, time.Since(start).Seconds())
			progressMu.Unlock()
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, j := range jobs {
		g.Go(func() error { return run(gctx, j) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	tallies := map[string]map[int]tally{} // method -> budget -> tally
	for _, m := range methods {
		tallies[m] = map[int]tally{}
		for _, b := range cfg.Budgets {
			tallies[m][b] = tally{}
		}
	}
	for _, j := range jobs {
		for _, m := range methods {
			tallies[m][j.budget].merge(j.tallies[m])
		}
	}
	for _, m := range methods {
		for _, b := range cfg.Budgets {
			t := tallies[m][b]
			for _, cat := range append([]int{0}, locomoCategories...) {
				cell := t[cat]
				if cell == nil {
					continue
				}
				name := "all"
				if cat != 0 {
					name = LoCoMoCategoryName(cat)
				}
				row := LoCoMoRow{Method: m, Default: m == "mneme-"+string(def), BudgetTokens: b, Category: name, Questions: cell.questions}
				if cell.evidence > 0 {
					row.EvidenceAvailable = round3(float64(cell.present) / float64(cell.evidence))
				}
				if cell.searched > 0 {
					n := float64(cell.searched)
					row.SearchRecallAt10 = ptr(round3(cell.recall / n))
					row.SearchHitAt10 = ptr(round3(cell.hit / n))
					row.SearchMRRAt10 = ptr(round3(cell.mrr / n))
				}
				rep.Rows = append(rep.Rows, row)
			}
		}
	}
	rep.Seconds = round3(time.Since(start).Seconds())
	return rep, nil
}

func ptr(f float64) *float64 { return &f }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func countAsked(c *LoCoMoConversation) int {
	n := 0
	for _, q := range c.Questions {
		if asked(q) {
			n++
		}
	}
	return n
}

// asked: categories 1–4 with at least one evidence turn.
func asked(q LoCoMoQuestion) bool {
	return q.Category >= LoCoMoMultiHop && q.Category <= LoCoMoSingleHop && len(q.Evidence) > 0
}

// locomoConv is a conversation rendered as the messages the bench appends.
type locomoConv struct {
	turns []LoCoMoTurn
	msgs  []message.Message
	// text is each turn's message text: what must appear verbatim in a
	// window for the turn to count as present.
	text  []string
	index map[string]int // dia id -> turn index
}

func locomoLines(c *LoCoMoConversation) *locomoConv {
	lc := &locomoConv{index: map[string]int{}}
	for _, s := range c.Sessions {
		for k, t := range s.Turns {
			text := t.Speaker + ": " + t.Text
			if t.BlipCaption != "" {
				text += " [image: " + t.BlipCaption + "]"
			}
			role := message.Assistant
			if t.Speaker == c.SpeakerA {
				role = message.User
			}
			m := message.NewText(role, text)
			m.Name = t.Speaker
			// The session's date, one second a turn so the order holds.
			m.Time = s.Date.Add(time.Duration(k) * time.Second)
			lc.index[t.DiaID] = len(lc.turns)
			lc.turns = append(lc.turns, t)
			lc.msgs = append(lc.msgs, m)
			lc.text = append(lc.text, text)
		}
	}
	return lc
}

// question renders a question as the next user turn, dated after the last
// session.
func (lc *locomoConv) question(q LoCoMoQuestion) message.Message {
	m := message.NewText(message.User, q.Question)
	if n := len(lc.msgs); n > 0 {
		m.Time = lc.msgs[n-1].Time.Add(time.Hour)
	}
	return m
}

// present counts the evidence turns whose text is in the window's text.
func (lc *locomoConv) present(windowText string, evidence []string) int {
	n := 0
	for _, d := range evidence {
		if strings.Contains(windowText, lc.text[lc.index[d]]) {
			n++
		}
	}
	return n
}

func runLoCoMoMneme(ctx context.Context, c *LoCoMoConversation, lc *locomoConv, model, policy string, budget int, s window.Strategy, t tally) error {
	p := window.DefaultPolicy()
	p.Model, p.BudgetTokens, p.Strategy = model, budget, s
	p, err := p.MergeJSON([]byte(policy))
	if err != nil {
		return err
	}
	st := inmem.New()
	defer st.Close()
	// Refs from a seed of the conversation's id: a run repeats token for
	// token (a ref's token count varies with its digits).
	cfg := mneme.Config{Store: st, Policy: &p, Refs: SeededRefs(seedOf(c.ID))}
	if s == window.Observe {
		cfg.Summarizer = compact.LLMConfig{} // the extractive observer
	}
	m, err := mneme.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	th := m.Thread("locomo", "conversation-"+c.ID)
	seqTurn := map[int64]int{}
	for i, msg := range lc.msgs {
		stored, _, err := th.AppendWindow(ctx, []message.Message{msg}, mneme.WindowOptions{})
		if err != nil {
			return fmt.Errorf("turn %s: %w", lc.turns[i].DiaID, err)
		}
		seqTurn[stored[0].Seq] = i
	}
	for _, q := range c.Questions {
		if !asked(q) {
			continue
		}
		w, err := th.PreviewHistory(ctx, []message.Message{lc.question(q)}, mneme.HistoryOptions{Append: true})
		if err != nil {
			return fmt.Errorf("question %q: %w", q.Question, err)
		}
		hits, err := m.Recall().Search(ctx, "locomo", store.SearchQuery{Text: q.Question, Thread: th.ID(), Limit: 10})
		if err != nil {
			return fmt.Errorf("search %q: %w", q.Question, err)
		}
		var ranked []string
		for _, h := range hits {
			if i, ok := seqTurn[h.Seq]; ok {
				ranked = append(ranked, lc.turns[i].DiaID)
			}
		}
		t.add(q.Category, len(q.Evidence), lc.present(WindowText(w), q.Evidence), scoreRanking(ranked, q.Evidence))
	}
	return nil
}

// runLoCoMoBaselines scores last-n and fts5 at one usable budget.
func runLoCoMoBaselines(ctx context.Context, c *LoCoMoConversation, lc *locomoConv, counter token.Counter, usable int, fts *fts5Index, lastN, ftsT tally) error {
	cost := make([]int, len(lc.msgs))
	for i, m := range lc.msgs {
		cost[i] = token.MessageTokens(counter, m)
	}
	for _, q := range c.Questions {
		if !asked(q) {
			continue
		}
		qm := lc.question(q)
		room := usable - window.ReplyPrimer - token.MessageTokens(counter, qm)
		// last-n: the latest turns that fit.
		var b strings.Builder
		latest(&b, lc, cost, len(lc.msgs), room)
		lastN.add(q.Category, len(q.Evidence), lc.present(b.String(), q.Evidence), nil)

		// fts5: its top 10 turns, then the latest turns in what is left.
		ranked, err := fts.search(ctx, q.Question, 10)
		if err != nil {
			return err
		}
		b.Reset()
		left := room
		var dias []string
		shown := map[int]bool{}
		for _, i := range ranked {
			dias = append(dias, lc.turns[i].DiaID)
			if cost[i] <= left {
				left -= cost[i]
				shown[i] = true
				b.WriteString(lc.text[i])
				b.WriteByte('\n')
			}
		}
		for i := len(lc.msgs) - 1; i >= 0; i-- {
			if shown[i] {
				continue
			}
			if cost[i] > left {
				break
			}
			left -= cost[i]
			b.WriteString(lc.text[i])
			b.WriteByte('\n')
		}
		ftsT.add(q.Category, len(q.Evidence), lc.present(b.String(), q.Evidence), scoreRanking(dias, q.Evidence))
	}
	return nil
}

// latest writes the texts of the latest turns before end that fit in room.
func latest(b *strings.Builder, lc *locomoConv, cost []int, end, room int) {
	for i := end - 1; i >= 0 && cost[i] <= room; i-- {
		room -= cost[i]
		b.WriteString(lc.text[i])
		b.WriteByte('\n')
	}
}

// fts5Index is the plain baseline: every turn in an SQLite FTS5 table
// (unicode61 tokenizer), queried with the question's words, stopwords
// dropped, OR-ed, ranked by bm25.
type fts5Index struct{ db *sql.DB }

func newFTS5(ctx context.Context, lc *locomoConv) (*fts5Index, error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one connection: one in-memory database
	if _, err := db.ExecContext(ctx, `CREATE VIRTUAL TABLE turns USING fts5(body)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("fts5 baseline: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	for i, text := range lc.text {
		if _, err := tx.ExecContext(ctx, `INSERT INTO turns(rowid, body) VALUES (?, ?)`, i+1, text); err != nil {
			tx.Rollback()
			db.Close()
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		db.Close()
		return nil, err
	}
	return &fts5Index{db: db}, nil
}

func (f *fts5Index) Close() error { return f.db.Close() }

// search returns turn indexes, best first.
func (f *fts5Index) search(ctx context.Context, q string, k int) ([]int, error) {
	var terms []string
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if stopwords[w] || seen[w] {
			continue
		}
		seen[w] = true
		terms = append(terms, `"`+w+`"`)
	}
	if len(terms) == 0 {
		return nil, nil
	}
	rows, err := f.db.QueryContext(ctx, `SELECT rowid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?`, strings.Join(terms, " OR "), k)
	if err != nil {
		return nil, fmt.Errorf("fts5 baseline: %w", err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id-1)
	}
	return out, rows.Err()
}

// stopwords are common English function words (the usual short list of
// search engines), dropped from the fts5 baseline's queries.
var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again against all am an and any are as at be because been
		before being below between both but by can could did do does doing down during each few for from further
		had has have having he her here hers herself him himself his how i if in into is it its itself just me
		more most my myself no nor not now of off on once only or other our ours ourselves out over own same she
		should so some such than that the their theirs them themselves then there these they this those through
		to too under until up very was we were what when where which while who whom why will with would you your
		yours yourself yourselves s t don`) {
		m[w] = true
	}
	return m
}()

// WriteLoCoMoTable prints the report as a table, one row per method,
// budget and category.
func WriteLoCoMoTable(w io.Writer, rep *LoCoMoReport) {
	fmt.Fprintf(w, "LoCoMo: conversations %s, tokenizer %s, %.1fs\n\n", strings.Join(rep.Conversations, ", "), rep.Model, rep.Seconds)
	fmt.Fprintf(w, "%-14s %7s %-12s %9s %9s %10s %8s %8s\n", "METHOD", "BUDGET", "CATEGORY", "QUESTIONS", "EVIDENCE", "RECALL@10", "HIT@10", "MRR@10")
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.3f", *p)
	}
	for _, r := range rep.Rows {
		name := r.Method
		if r.Default {
			name += " *"
		}
		fmt.Fprintf(w, "%-14s %7d %-12s %9d %9.3f %10s %8s %8s\n", name, r.BudgetTokens, r.Category, r.Questions, r.EvidenceAvailable, f(r.SearchRecallAt10), f(r.SearchHitAt10), f(r.SearchMRRAt10))
	}
	fmt.Fprintln(w, "\n* Mneme's default policy. EVIDENCE: share of the questions' evidence turns in the window (raw, or verbatim in the memory or recalled block).")
}
