package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
)

// replyFailingStore refuses to log assistant replies while failing is set.
type replyFailingStore struct {
	store.Store
	failing atomic.Bool
}

func (s *replyFailingStore) Append(ctx context.Context, tenant, thread string, after int64, evs []store.Event) ([]store.Event, error) {
	for _, ev := range evs {
		if s.failing.Load() && ev.Message != nil && ev.Message.Role == message.Assistant {
			return nil, errors.New("disk full")
		}
	}
	return s.Store.Append(ctx, tenant, thread, after, evs)
}

// I1: a reply the log cannot keep is not acknowledged. The client gets an
// error in its API's shape, and its retry of the same history is answered
// and logged once.
func TestReplyNotLoggedIsNotAcknowledged(t *testing.T) {
	var fs *replyFailingStore
	r := startRig(t, rigOpts{wrap: func(st store.Store) store.Store { fs = &replyFailingStore{Store: st}; return fs }})
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"log me first"}]}`
	fs.failing.Store(true)
	status, _, out := r.do(t, "POST", "/v1/chat/completions", "", body, "X-Mneme-Thread", "i1")
	if status < 500 || !strings.Contains(string(out), `"error"`) {
		t.Fatalf("status %d %s: want a 5xx in OpenAI's error shape", status, out)
	}
	fs.failing.Store(false)
	status, _, out = r.do(t, "POST", "/v1/chat/completions", "", body, "X-Mneme-Thread", "i1")
	if status != http.StatusOK {
		t.Fatalf("retry: %d %s", status, out)
	}
	msgs := r.messagesOf(t, "default", "i1")
	if len(msgs) != 2 || msgs[0].TextOf() != "log me first" || msgs[1].Role != message.Assistant {
		t.Fatalf("log after the retry: %v", summaryOf(msgs))
	}
}

func summaryOf(ms []message.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Role)+": "+m.TextOf())
	}
	return out
}
