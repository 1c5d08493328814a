package inmem_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/eval"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/storetest"
)

// fillAgent appends the n messages of storetest.AgentThread to thread,
// a minute apart.
func fillAgent(t testing.TB, st store.Store, tenant, thread string, n int) {
	ctx := context.Background()
	at := time.Date(2026, 3, 15, 9, 0, 0, 0, time.UTC)
	evs := storetest.AgentThread(n)
	for i := range evs {
		evs[i].At = at.Add(time.Duration(i+1) * time.Minute)
	}
	for i := 0; i < len(evs); i += 500 {
		if _, err := st.Append(ctx, tenant, thread, int64(i), evs[i:min(i+500, len(evs))]); err != nil {
			t.Fatal(err)
		}
	}
}

// agentQuery is auto-recall's query on the agent thread: the request, and
// the request with the reply before it.
func agentQuery(f int) []string {
	req := fmt.Sprintf("Look again at src/f%d.go: does F%d still return nil?", f, f%1000)
	return []string{req, req + "\n\nIt does."}
}

// TestSearchMatchesExhaustive: Search (postings) gives exactly the hits of
// SearchExhaustive (every document read), scores to the bit, snippets
// included, on the LoCoMo conversations (every question, in its thread, and
// some across the tenant and with each filter), on an agent's thread
// (auto-recall's queries, phrases, identifiers) and on random queries of
// the corpus's own words and phrases.
func TestSearchMatchesExhaustive(t *testing.T) {
	convs, err := eval.LoadLoCoMo(storetest.LoCoMoDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := inmem.New()
	defer s.Close()
	if _, err := storetest.LoadConversations(ctx, s, "locomo", convs); err != nil {
		t.Fatal(err)
	}
	fillAgent(t, s, "agent", "a", 2000)
	fillAgent(t, s, "agent", "b", 300)

	compared, found := 0, 0
	check := func(tenant string, q store.SearchQuery) {
		t.Helper()
		got, err := s.Search(ctx, tenant, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, everyDoc := range []bool{false, true} {
			if everyDoc && compared%4 != 0 { // the definition is slow: a sample
				continue
			}
			want, err := inmem.SearchExhaustive(s, tenant, q, everyDoc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %+v (every document read: %v):\n got %v\nwant %v", tenant, q, everyDoc, got, want)
			}
		}
		compared++
		if len(got) > 0 {
			found++
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var words []string // the corpus's words, for random queries
	var lines []string
	for ci, c := range convs {
		thread := "locomo-" + c.ID
		info, err := s.Thread(ctx, "locomo", thread)
		if err != nil {
			t.Fatal(err)
		}
		for _, sess := range c.Sessions {
			for _, turn := range sess.Turns {
				lines = append(lines, turn.Text)
				words = append(words, strings.Fields(turn.Text)...)
			}
		}
		for i, qa := range c.Questions {
			check("locomo", store.SearchQuery{Text: qa.Question, Thread: thread, Limit: 10})
			switch i % 7 {
			case 0:
				check("locomo", store.SearchQuery{Text: qa.Question, Thread: thread, Limit: 100})
			case 1:
				check("locomo", store.SearchQuery{Text: qa.Question, Thread: thread, Role: message.User})
			case 2:
				check("locomo", store.SearchQuery{Text: qa.Question, Thread: thread, FromSeq: info.Events / 4, ToSeq: 3 * info.Events / 4})
			case 3:
				mid := c.Sessions[len(c.Sessions)/2].Date
				check("locomo", store.SearchQuery{Text: qa.Question, Thread: thread, Since: mid})
				check("locomo", store.SearchQuery{Text: qa.Question, Thread: thread, Until: mid})
			case 4:
				if ci < 3 {
					check("locomo", store.SearchQuery{Text: qa.Question, Limit: 20}) // the tenant
				}
			}
		}
	}
	for f := range 40 {
		for _, text := range agentQuery(f * 37 % 900) {
			check("agent", store.SearchQuery{Text: text, Thread: "a", Limit: 100})
		}
	}
	for _, text := range []string{`"return nil"`, `"func F12"`, "context error INV-4401", "step 12", `"src/f3.go"`, "INV-4019 INV-4039", "read_file f7", `"Context error" nil`} {
		check("agent", store.SearchQuery{Text: text, Thread: "a", Limit: 50})
		check("agent", store.SearchQuery{Text: text, Limit: 50})
		check("agent", store.SearchQuery{Text: text, Thread: "a", Role: message.Tool, FromSeq: 100, ToSeq: 900})
	}
	for range 200 {
		var b strings.Builder
		for range 1 + rng.IntN(6) {
			b.WriteString(words[rng.IntN(len(words))] + " ")
		}
		if rng.IntN(2) == 0 { // a quoted run of a turn's words
			f := strings.Fields(lines[rng.IntN(len(lines))])
			i := rng.IntN(len(f))
			b.WriteString(`"` + strings.Join(f[i:min(len(f), i+1+rng.IntN(3))], " ") + `"`)
		}
		thread := "locomo-" + convs[rng.IntN(len(convs))].ID
		check("locomo", store.SearchQuery{Text: b.String(), Thread: thread, Limit: 1 + rng.IntN(30)})
	}
	t.Logf("%d searches compared, %d with hits", compared, found)
	if found < compared/2 {
		t.Errorf("only %d of %d searches found anything: the comparison shows little", found, compared)
	}
}

// BenchmarkSearchPaths: a search of auto-recall's on a 2,000-message agent
// thread (BenchmarkAutoRecall's), and a LoCoMo question in its
// conversation, by postings (Search) and by reading every document
// (SearchExhaustive), side by side.
//
//	go test -run '^$' -bench SearchPaths ./store/inmem/
func BenchmarkSearchPaths(b *testing.B) {
	ctx := context.Background()
	s := inmem.New()
	defer s.Close()
	fillAgent(b, s, "agent", "a", 2000)
	convs, err := eval.LoadLoCoMo(storetest.LoCoMoDir)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := storetest.LoadConversations(ctx, s, "locomo", convs[:1]); err != nil {
		b.Fatal(err)
	}
	paths := []struct {
		name   string
		search func(context.Context, string, store.SearchQuery) ([]store.Hit, error)
	}{
		{"postings", s.Search},
		{"exhaustive", func(_ context.Context, tenant string, q store.SearchQuery) ([]store.Hit, error) {
			return inmem.SearchExhaustive(s, tenant, q, false)
		}},
	}
	for _, p := range paths {
		b.Run("agent/"+p.name, func(b *testing.B) {
			i := 0
			cpu0 := storetest.CPUTime()
			for b.Loop() {
				for _, text := range agentQuery(i * 37 % 900) {
					if _, err := p.search(ctx, "agent", store.SearchQuery{Text: text, Thread: "a", Limit: 100}); err != nil {
						b.Fatal(err)
					}
				}
				i++
			}
			reportCPU(b, cpu0)
		})
	}
	qs := convs[0].Questions
	for _, p := range paths {
		b.Run("locomo/"+p.name, func(b *testing.B) {
			i := 0
			cpu0 := storetest.CPUTime()
			for b.Loop() {
				if _, err := p.search(ctx, "locomo", store.SearchQuery{Text: qs[i%len(qs)].Question, Thread: "locomo-" + convs[0].ID, Limit: 10}); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportCPU(b, cpu0)
		})
	}
}

// reportCPU reports the process's CPU time per op since cpu0.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((storetest.CPUTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}
