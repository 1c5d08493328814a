package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/compact"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/token"
	"github.com/mnemehq/mneme/window"
)

// contextStrategy is one way of managing an agent's context: given what a
// turn appended, the window of the next model call.
type contextStrategy interface {
	// Call appends msgs and returns the window and its tokens.
	Call(ctx context.Context, msgs []message.Message) ([]message.Message, int, error)
	// Recall returns the texts of the top k archive hits for query; nil
	// for a strategy with no archive.
	Recall(ctx context.Context, query string, k int) ([]string, error)
	// Compactions is how many times the window was compacted or trimmed.
	Compactions() int
	Close() error
}

// history is the baselines' shared state: the whole conversation and each
// message's token count, counted once.
type history struct {
	c      token.Counter
	msgs   []message.Message
	tokens []int
}

func (h *history) add(msgs []message.Message) {
	for _, m := range msgs {
		h.msgs = append(h.msgs, m)
		h.tokens = append(h.tokens, token.MessageTokens(h.c, m))
	}
}

func (h *history) sum(from int) int {
	n := window.ReplyPrimer
	for _, t := range h.tokens[from:] {
		n += t
	}
	return n
}

// fullHistory sends everything, every time: no management at all.
type fullHistory struct {
	h     history
	total int
}

func (s *fullHistory) Call(_ context.Context, msgs []message.Message) ([]message.Message, int, error) {
	if s.total == 0 {
		s.total = window.ReplyPrimer
	}
	s.h.add(msgs)
	for _, t := range s.h.tokens[len(s.h.tokens)-len(msgs):] {
		s.total += t
	}
	return s.h.msgs, s.total, nil
}
func (s *fullHistory) Recall(context.Context, string, int) ([]string, error) { return nil, nil }
func (s *fullHistory) Compactions() int                                      { return 0 }
func (s *fullHistory) Close() error                                          { return nil }

// lastN keeps the system prompt and the last N messages, cut wherever N
// falls (the classic sliding window: it can orphan a tool result).
type lastN struct {
	h     history
	n     int
	trims int
}

func (s *lastN) Call(_ context.Context, msgs []message.Message) ([]message.Message, int, error) {
	s.h.add(msgs)
	sys, rest := systemPrefix(s.h.msgs)
	if len(rest) <= s.n {
		return s.h.msgs, s.h.sum(0), nil
	}
	s.trims++
	from := len(s.h.msgs) - s.n
	w := append(append([]message.Message{}, s.h.msgs[:sys]...), s.h.msgs[from:]...)
	return w, s.h.sum(from) + s.h.sum(0) - s.h.sum(sys), nil
}
func (s *lastN) Recall(context.Context, string, int) ([]string, error) { return nil, nil }
func (s *lastN) Compactions() int                                      { return s.trims }
func (s *lastN) Close() error                                          { return nil }

// systemPrefix returns how many leading system messages msgs has.
func systemPrefix(msgs []message.Message) (int, []message.Message) {
	i := 0
	for i < len(msgs) && msgs[i].Role == message.System {
		i++
	}
	return i, msgs[i:]
}

// tokenTrim is LangChain's trim_messages(strategy="last", max_tokens=budget,
// include_system=True, start_on="human", allow_partial=False): the longest
// suffix that fits the budget with the system prompt, then cut forward to
// its first user message so that it starts a turn.
type tokenTrim struct {
	h      history
	budget int
	trims  int
}

func (s *tokenTrim) Call(_ context.Context, msgs []message.Message) ([]message.Message, int, error) {
	s.h.add(msgs)
	sys, _ := systemPrefix(s.h.msgs)
	used := s.h.sum(0)
	if used <= s.budget {
		return s.h.msgs, used, nil
	}
	s.trims++
	room := s.budget - (s.h.sum(0) - s.h.sum(sys)) - window.ReplyPrimer
	from := len(s.h.msgs)
	for from > sys && room-s.h.tokens[from-1] >= 0 {
		from--
		room -= s.h.tokens[from]
	}
	for from < len(s.h.msgs) && s.h.msgs[from].Role != message.User {
		from++
	}
	w := append(append([]message.Message{}, s.h.msgs[:sys]...), s.h.msgs[from:]...)
	return w, s.h.sum(from) + s.h.sum(0) - s.h.sum(sys), nil
}
func (s *tokenTrim) Recall(context.Context, string, int) ([]string, error) { return nil, nil }
func (s *tokenTrim) Compactions() int                                      { return s.trims }
func (s *tokenTrim) Close() error                                          { return nil }

// summarizeAll is the summarize-everything baseline (pydantic-deep's
// summarization processor): when the window passes 90% of the budget,
// everything but the system prompt and the last keep messages (moved back
// so that no tool result loses its call) is replaced by one summary
// message, the previous summary included. The summary is the deterministic
// extractive one (no model is reachable here), bounded to a tenth of the
// budget.
type summarizeAll struct {
	c       token.Counter
	budget  int
	keep    int
	sys     []message.Message
	summary *message.Message
	live    history
	n       int
}

func (s *summarizeAll) window() ([]message.Message, int) {
	w := append([]message.Message{}, s.sys...)
	n := s.live.sum(0)
	for _, m := range s.sys {
		n += token.MessageTokens(s.c, m)
	}
	if s.summary != nil {
		w = append(w, *s.summary)
		n += token.MessageTokens(s.c, *s.summary)
	}
	return append(w, s.live.msgs...), n
}

func (s *summarizeAll) Call(ctx context.Context, msgs []message.Message) ([]message.Message, int, error) {
	for _, m := range msgs {
		if m.Role == message.System && len(s.live.msgs) == 0 && s.summary == nil {
			s.sys = append(s.sys, m)
			continue
		}
		s.live.add([]message.Message{m})
	}
	w, used := s.window()
	if used <= s.budget*9/10 || len(s.live.msgs) <= s.keep {
		return w, used, nil
	}
	cut := len(s.live.msgs) - s.keep
	for cut > 0 && s.live.msgs[cut].IsToolResult() {
		cut--
	}
	if cut == 0 {
		return w, used, nil
	}
	var entries []compact.Entry
	if s.summary != nil {
		entries = append(entries, compact.Entry{Seq: 0, Msg: s.summary})
	}
	for i := 0; i < cut; i++ {
		entries = append(entries, compact.Entry{Seq: int64(i + 1), Msg: &s.live.msgs[i], At: s.live.msgs[i].Time})
	}
	out, err := compact.Extractive{Counter: s.c}.Observe(ctx, compact.Segment{From: 1, To: int64(cut), Entries: entries, MaxTokens: s.budget / 10})
	if err != nil {
		return nil, 0, err
	}
	sum := message.NewText(message.User, "Summary of the conversation so far:\n"+out.Text)
	s.summary = &sum
	s.live.msgs = append([]message.Message{}, s.live.msgs[cut:]...)
	s.live.tokens = append([]int{}, s.live.tokens[cut:]...)
	s.n++
	w, used = s.window()
	return w, used, nil
}
func (s *summarizeAll) Recall(context.Context, string, int) ([]string, error) { return nil, nil }
func (s *summarizeAll) Compactions() int                                      { return s.n }
func (s *summarizeAll) Close() error                                          { return nil }

// mnemeStrategy runs the engine through its public API on an in-memory
// store; its archive search is the recall a model would do with
// mneme_search.
type mnemeStrategy struct {
	m      *mneme.Engine
	st     store.Store
	th     *mneme.Thread
	last   *window.Window
	closer func()
}

func newMnemeStrategy(ctx context.Context, p window.Policy, cfg mneme.Config, seed uint64, closer func()) (*mnemeStrategy, error) {
	st := inmem.New()
	// Refs from the session's seed: a run repeats token for token.
	cfg.Store, cfg.Policy, cfg.Refs = st, &p, SeededRefs(seed)
	m, err := mneme.Open(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &mnemeStrategy{m: m, st: st, th: m.Thread("bench", "session"), closer: closer}, nil
}

func (s *mnemeStrategy) Call(ctx context.Context, msgs []message.Message) ([]message.Message, int, error) {
	_, w, err := s.th.AppendWindow(ctx, msgs, mneme.WindowOptions{})
	if err != nil {
		return nil, 0, err
	}
	s.last = w
	return w.Messages, w.Usage.Total, nil
}

func (s *mnemeStrategy) Recall(ctx context.Context, query string, k int) ([]string, error) {
	hits, err := s.st.Search(ctx, "bench", store.SearchQuery{Text: query, Thread: s.th.ID(), Limit: k})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(hits))
	for _, h := range hits {
		_, ev, err := s.st.EventByRef(ctx, "bench", h.Ref)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h.Ref, err)
		}
		if ev.Message != nil {
			out = append(out, ev.Message.PlainText())
		}
	}
	return out, nil
}

// provenance records who wrote the observations and how often the
// summarizer fell back.
func (s *mnemeStrategy) provenance(ctx context.Context, rec *Record) error {
	evs, err := s.th.Events(ctx, 1, 0)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Kind != store.KindCompacted {
			continue
		}
		var d window.CompactedData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return fmt.Errorf("compacted event %d: %w", ev.Seq, err)
		}
		if d.Model != "" {
			rec.Summarizer = d.Model
		}
		if d.Fallback != "" {
			rec.Fallbacks++
		}
	}
	return nil
}

func (s *mnemeStrategy) Compactions() int {
	if s.last == nil {
		return 0
	}
	return s.last.Usage.Compactions
}

func (s *mnemeStrategy) Close() error {
	err := s.m.Close()
	s.st.Close()
	if s.closer != nil {
		s.closer()
	}
	return err
}

// datedMessages stamps every message of a session with a clock that
// advances a minute a turn, so that runs are reproducible.
func datedMessages(turn int, msgs []message.Message) []message.Message {
	at := epoch.Add(time.Duration(turn) * time.Minute)
	out := make([]message.Message, len(msgs))
	for i, m := range msgs {
		m.Time = at
		out[i] = m
	}
	return out
}
