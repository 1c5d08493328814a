package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mnemehq/mneme/store"
)

// Server-side recall: the tools the proxy adds to a request whose window
// has left something out, and their answers. This file stands alone so
// that the recall package can replace it: the rest of the proxy needs only
// IsRecallTool, recallTools and (*recaller).answer.

// The recall tools' names.
const (
	ToolSearch = "mneme_search"
	ToolRead   = "mneme_read"
)

// IsRecallTool reports whether name is one of the tools the proxy answers.
func IsRecallTool(name string) bool { return name == ToolSearch || name == ToolRead }

const (
	searchDesc = "Search this conversation's full history, including what is no longer shown (masked, evicted or summarized messages). Returns matching messages with their ref."
	readDesc   = "Read a message of this conversation's history by ref (as named in placeholders and search results), by lines. Returns the lines and the total line count."
)

var searchSchema = `{"type":"object","properties":{"query":{"type":"string","description":"words, ids, paths or error text to find"},"limit":{"type":"integer","description":"max results, default 8"}},"required":["query"]}`

var readSchema = `{"type":"object","properties":{"ref":{"type":"string","description":"the message ref, e.g. m_0123abcd..."},"offset":{"type":"integer","description":"first line, from 1"},"limit":{"type":"integer","description":"lines to read, default 200"}},"required":["ref"]}`

// recallTools returns the tool schemas in the shape of api.
func recallTools(api API) [][]byte {
	if api == Anthropic {
		return [][]byte{
			fmt.Appendf(nil, `{"name":%q,"description":%q,"input_schema":%s}`, ToolSearch, searchDesc, searchSchema),
			fmt.Appendf(nil, `{"name":%q,"description":%q,"input_schema":%s}`, ToolRead, readDesc, readSchema),
		}
	}
	return [][]byte{
		fmt.Appendf(nil, `{"type":"function","function":{"name":%q,"description":%q,"parameters":%s}}`, ToolSearch, searchDesc, searchSchema),
		fmt.Appendf(nil, `{"type":"function","function":{"name":%q,"description":%q,"parameters":%s}}`, ToolRead, readDesc, readSchema),
	}
}

// recaller answers recall tool calls from the store, scoped to one tenant
// (I8) and, for search, to one thread.
type recaller struct {
	store store.Store
}

// Read limits.
const (
	defaultReadLines = 200
	maxReadLines     = 2000
	maxSearchHits    = 20
)

// answer returns the text of the tool result for one call. Errors the
// model can correct (a bad ref, a missing query) are answered as text, for
// the model to read; only store failures are returned as errors.
func (r recaller) answer(ctx context.Context, tenant, thread, name, args string) (string, error) {
	var a struct {
		Query  string `json:"query"`
		Limit  int    `json:"limit"`
		Ref    string `json:"ref"`
		Offset int    `json:"offset"`
	}
	if strings.TrimSpace(args) != "" {
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return fmt.Sprintf("error: arguments are not a JSON object: %v", err), nil
		}
	}
	switch name {
	case ToolSearch:
		return r.search(ctx, tenant, thread, a.Query, a.Limit)
	case ToolRead:
		return r.read(ctx, tenant, a.Ref, a.Offset, a.Limit)
	}
	return "error: unknown tool " + name, nil
}

func (r recaller) search(ctx context.Context, tenant, thread, query string, limit int) (string, error) {
	if strings.TrimSpace(query) == "" {
		return "error: query is required", nil
	}
	if limit <= 0 {
		limit = 8
	}
	hits, err := r.store.Search(ctx, tenant, store.SearchQuery{Text: query, Thread: thread, Limit: min(limit, maxSearchHits)})
	if errors.Is(err, store.ErrInvalid) {
		return "error: " + err.Error(), nil
	}
	if err != nil {
		return "", err
	}
	if len(hits) == 0 {
		return fmt.Sprintf("no results for %q", query), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d results for %q (read one whole with mneme_read(ref)):\n", len(hits), query)
	for _, h := range hits {
		tool := ""
		if h.Tool != "" {
			tool = " " + h.Tool
		}
		fmt.Fprintf(&b, "- ref %s seq %d %s%s: %s\n", h.Ref, h.Seq, h.Role, tool, strings.ReplaceAll(h.Snippet, "\n", " "))
	}
	return b.String(), nil
}

func (r recaller) read(ctx context.Context, tenant, ref string, offset, limit int) (string, error) {
	if ref == "" {
		return "error: ref is required", nil
	}
	_, ev, err := r.store.EventByRef(ctx, tenant, ref)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
		return fmt.Sprintf("error: no message with ref %q", ref), nil
	}
	if err != nil {
		return "", err
	}
	if ev.Message == nil {
		return fmt.Sprintf("error: ref %q is not a message", ref), nil
	}
	lines := strings.Split(ev.Message.PlainText(), "\n")
	if offset < 1 {
		offset = 1
	}
	if limit <= 0 {
		limit = defaultReadLines
	}
	limit = min(limit, maxReadLines)
	total := len(lines)
	if offset > total {
		return fmt.Sprintf("ref %s (seq %d, %s): %d lines in total; offset %d is past the end", ref, ev.Seq, ev.Message.Role, total, offset), nil
	}
	end := min(total, offset-1+limit)
	var b strings.Builder
	fmt.Fprintf(&b, "ref %s (seq %d, %s): lines %d-%d of %d total\n", ref, ev.Seq, ev.Message.Role, offset, end, total)
	b.WriteString(strings.Join(lines[offset-1:end], "\n"))
	if end < total {
		fmt.Fprintf(&b, "\n[%d more lines: mneme_read(ref=%q, offset=%d)]", total-end, ref, end+1)
	}
	return b.String(), nil
}
