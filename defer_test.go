package mneme_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
)

// appendCounter counts a store's appends (one per durable commit).
type appendCounter struct {
	store.Store
	n atomic.Int64
}

func (c *appendCounter) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	c.n.Add(1)
	return c.Store.Append(ctx, tenant, thread, after, evs)
}

func (c *appendCounter) Unwrap() store.Store { return c.Store }

// TestDeferredTurns: a deferred request (HistoryOptions.Defer, what the
// proxy uses) is written with its reply in one append, alone when the turn
// ends without a reply, and placed again when another process wrote the
// thread meanwhile; no log ever holds a reply without its request, and a
// deleted thread stays deleted.
func TestDeferredTurns(t *testing.T) {
	seed := conv("user", "U1", "assistant", "A1")
	next := append(append([]message.Message(nil), seed...), message.NewText(message.User, "U2"))
	reply := message.NewText(message.Assistant, "R2")
	cases := []struct {
		name string
		// between runs after the deferred turn began, with a second
		// engine on the same store (another process).
		between func(t *testing.T, other *mneme.Engine)
		record  bool
		append  bool // append mode: the request holds U2 alone
		// want is each thread's log, "" naming the thread the turn began
		// on; wantAppends how many appends the turn made.
		want        map[string][]string
		wantAppends int64
		wantErr     error
	}{
		{name: "recorded", record: true, wantAppends: 1,
			want: map[string][]string{"": {"user:U1", "assistant:A1", "user:U2", "assistant:R2"}}},
		{name: "recorded, append mode", record: true, append: true, wantAppends: 1,
			want: map[string][]string{"": {"user:U1", "assistant:A1", "user:U2", "assistant:R2"}}},
		{name: "no reply", record: false, wantAppends: 1,
			want: map[string][]string{"": {"user:U1", "assistant:A1", "user:U2"}}},
		{name: "another process continued", record: true,
			between: func(t *testing.T, other *mneme.Engine) {
				turn(t, other.Thread("default", "t"), "B3", append(append([]message.Message(nil), seed...), message.NewText(message.User, "U3"))...)
			},
			want: map[string][]string{
				"":       {"user:U1", "assistant:A1", "user:U3", "assistant:B3"},
				"branch": {"user:U1", "assistant:A1", "user:U2", "assistant:R2"},
			}},
		{name: "another process appended, append mode", record: true, append: true,
			between: func(t *testing.T, other *mneme.Engine) {
				if _, err := other.Thread("default", "t").Append(context.Background(), message.NewText(message.User, "X")); err != nil {
					t.Fatal(err)
				}
			},
			want: map[string][]string{"": {"user:U1", "assistant:A1", "user:X", "user:U2", "assistant:R2"}}},
		{name: "another process appended, no reply", record: false,
			between: func(t *testing.T, other *mneme.Engine) {
				if _, err := other.Thread("default", "t").Append(context.Background(), message.NewText(message.User, "X")); err != nil {
					t.Fatal(err)
				}
			},
			// The request failed and its place is gone: it is not
			// logged (the client got no reply; its retry carries it).
			want: map[string][]string{"": {"user:U1", "assistant:A1", "user:X"}}},
		{name: "deleted meanwhile", record: true, wantErr: mneme.ErrDeleted,
			between: func(t *testing.T, other *mneme.Engine) {
				if err := other.Thread("default", "t").Delete(context.Background()); err != nil {
					t.Fatal(err)
				}
			},
			want: map[string][]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			st := &appendCounter{Store: inmem.New()}
			m, err := mneme.Open(ctx, mneme.Config{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			other, err := mneme.Open(ctx, mneme.Config{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			th := m.Thread("default", "t")
			turn(t, th, "", seed...)
			hist, o := next, mneme.HistoryOptions{Defer: true}
			if c.append {
				hist, o.Append = next[len(seed):], true
			}
			x, err := th.AppendHistory(ctx, hist, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := lines(t, other, "t"); len(got) != len(seed) {
				t.Fatalf("the deferred request is in the log before its reply: %q", got)
			}
			if c.between != nil {
				c.between(t, other)
			}
			before := st.n.Load()
			if c.record {
				if _, err := x.Record(ctx, reply); !errors.Is(err, c.wantErr) {
					t.Fatalf("record: %v, want %v", err, c.wantErr)
				}
			}
			branch := x.Thread()
			x.Close()
			if c.wantAppends > 0 {
				if got := st.n.Load() - before; got != c.wantAppends {
					t.Errorf("the turn made %d appends, want %d", got, c.wantAppends)
				}
			}
			ids := threadIDs(t, other)
			if len(ids) != len(c.want) {
				t.Errorf("threads %q, want %d", ids, len(c.want))
			}
			for name, want := range c.want {
				id := "t"
				if name == "branch" {
					id = branch
					if id == "t" {
						t.Fatalf("the reply did not go to a branch")
					}
				}
				wantLines(t, name, lines(t, other, id), want...)
			}
			// Whatever the engine holds matches the log: a fresh engine
			// replaying it builds the same window.
			for _, id := range ids {
				a, err := m.Thread("default", id).Window(ctx, mneme.WindowOptions{})
				if err != nil {
					t.Fatal(err)
				}
				fresh, err := mneme.Open(ctx, mneme.Config{Store: st})
				if err != nil {
					t.Fatal(err)
				}
				b, err := fresh.Thread("default", id).Window(ctx, mneme.WindowOptions{})
				fresh.Close()
				if err != nil {
					t.Fatal(err)
				}
				if got, want := texts(a.Messages), texts(b.Messages); got != want {
					t.Errorf("thread %s: window in memory %q, replayed %q", id, got, want)
				}
			}
		})
	}
}

func texts(msgs []message.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(string(m.Role) + ":" + m.PlainText() + "|")
	}
	return b.String()
}
