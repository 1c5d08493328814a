package proxy

import (
	"context"
	"errors"

	"github.com/mnemehq/mneme/recall"
)

// Server-side recall: the tools the proxy adds to a request whose window
// has left something out, and their answers, from the recall package. The
// proxy answers mneme_search and mneme_read itself; the client never sees
// them.

// The recall tools' names.
const (
	ToolSearch = recall.ToolSearch
	ToolRead   = recall.ToolRead
)

// IsRecallTool reports whether name is one of the tools the proxy answers.
func IsRecallTool(name string) bool { return name == ToolSearch || name == ToolRead }

// recallTools returns the tool schemas in the shape of api (the same bytes
// on every call, so the request prefix stays cacheable).
func recallTools(api API) [][]byte {
	shape := recall.OpenAI
	if api == Anthropic {
		shape = recall.Anthropic
	}
	defs := recall.Definitions(shape, recall.RecallTools...)
	out := make([][]byte, len(defs))
	for i, d := range defs {
		out[i] = d
	}
	return out
}

// recaller answers recall tool calls, scoped to one tenant and thread (I8).
type recaller struct {
	h *recall.Handler
}

// answer returns the text of the tool result for one call. Mistakes the
// model can correct (a bad ref, a missing query) are answered as text for
// the model to read; only store failures are errors.
func (r recaller) answer(ctx context.Context, tenant, thread, name, args string) (string, error) {
	text, err := r.h.Call(ctx, recall.Scope{Tenant: tenant, Thread: thread}, name, args)
	if errors.Is(err, recall.ErrTool) {
		return text, nil
	}
	return text, err
}
