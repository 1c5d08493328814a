package fakellm

import (
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The values of [Request.API] and [Recorded.API].
const (
	APIOpenAI    = "openai"
	APIAnthropic = "anthropic"
)

// Markers that make a request a summarization request (see [Summarize]).
const (
	MarkerObserver  = "mneme:observer"
	MarkerReflector = "mneme:reflector"
)

// ToolCall is one tool call a scripted reply makes.
type ToolCall struct {
	// ID is the call id; when empty one is generated ("call_…" for OpenAI,
	// "toolu_…" for Anthropic).
	ID string
	// Name is the tool's name.
	Name string
	// Arguments is the call's arguments as JSON text. Empty means "{}". For an
	// Anthropic non-streaming reply, text that is not a JSON object becomes {}
	// (the wire format has no way to carry it); streaming sends it as is.
	Arguments string
}

// Usage overrides the token counts a reply reports.
type Usage struct {
	InputTokens  int // prompt_tokens (OpenAI) / input_tokens (Anthropic)
	OutputTokens int // completion_tokens (OpenAI) / output_tokens (Anthropic)
}

// Reply is what one completion request gets back: a scripted answer, an error
// or a transport fault. The zero Reply is an empty successful answer.
type Reply struct {
	// Text is the assistant's text.
	Text string
	// ToolCalls are the tool calls the assistant makes, after Text.
	ToolCalls []ToolCall
	// Thinking, for an Anthropic request that enables extended thinking, is
	// sent as a thinking block before the text, signed by this process; a
	// later request that sends the block back with its thinking or
	// signature changed is a 400, as with the real API.
	Thinking string
	// RedactedThinking, on such a request, adds a redacted_thinking block
	// (opaque data, checked the same way) after the thinking block.
	RedactedThinking bool

	// Status, when not 0 or 200, makes the reply an HTTP error with that
	// status. Body is sent as is; when empty, the API's own error JSON is
	// produced. A 429 or 529 carries Retry-After headers (see RetryAfter).
	Status int
	// Body is the raw error body sent with Status.
	Body string
	// RetryAfter is the delay announced with a 429 or 529 (Retry-After in
	// seconds, Retry-After-Ms in milliseconds). Zero announces 0.
	RetryAfter time.Duration

	// Delay is waited before answering; the request's cancellation ends it.
	Delay time.Duration
	// ChunkDelay is waited between streamed chunks.
	ChunkDelay time.Duration
	// Malformed sends a 200 whose body is not valid JSON (streaming: one
	// event whose data is not valid JSON, then the normal end).
	Malformed bool
	// CutAfter > 0 closes the connection abruptly after that many streamed
	// chunks (OpenAI data lines, Anthropic events), without the terminator.
	// On a non-streaming request it sends the headers and half the body.
	CutAfter int

	// StopReason overrides finish_reason / stop_reason. The neutral values
	// map across APIs: "stop"⇄"end_turn", "length"⇄"max_tokens",
	// "tool_calls"⇄"tool_use"; any other value is sent as is.
	StopReason string
	// Usage overrides the token counts; nil means a rough estimate.
	Usage *Usage
}

// Request is what a [WithHandler] function sees of a completion request.
type Request struct {
	// API is APIOpenAI or APIAnthropic.
	API string
	// Model is the request's model.
	Model string
	// Stream reports whether the client asked for a stream.
	Stream bool
	// MaxTokens is max_tokens (or max_completion_tokens); 0 when absent.
	MaxTokens int
	// Body is the raw request body.
	Body []byte
	// Messages are the request's messages as decoded JSON objects.
	Messages []map[string]any
	// System is the system prompt text: Anthropic "system", or the OpenAI
	// system and developer messages joined by newlines.
	System string
	// Tools are the names of the tools the request offers.
	Tools []string
	// LastUserText is the text of the last user message that has text.
	LastUserText string
	// Header is the request's headers.
	Header http.Header
	// Thinking reports an Anthropic request that enables extended thinking.
	Thinking bool

	toolTokens int // rough size of the tool schemas, for usage
}

// IsSummarization reports whether the request carries a summarization marker
// in its system prompt or first message.
func (r Request) IsSummarization() bool {
	if hasMarker(r.System) {
		return true
	}
	return len(r.Messages) > 0 && hasMarker(contentText(r.Messages[0]["content"]))
}

func hasMarker(s string) bool {
	return strings.Contains(s, MarkerObserver) || strings.Contains(s, MarkerReflector)
}

// DefaultReply is the answer a request gets when nothing is scripted: an
// extractive summary for a summarization request, else "ok: " and the first
// 60 characters of the last user text.
func DefaultReply(r Request) Reply {
	if r.IsSummarization() {
		var texts []string
		for _, m := range r.Messages {
			if role, _ := m["role"].(string); role == "system" || role == "developer" {
				continue
			}
			texts = append(texts, contentText(m["content"]))
			if calls, ok := m["tool_calls"].([]any); ok {
				for _, c := range calls {
					texts = append(texts, contentText([]any{c}))
				}
			}
		}
		return Reply{Text: Summarize(strings.Join(texts, "\n"))}
	}
	last := strings.Join(strings.Fields(r.LastUserText), " ")
	if last == "" {
		return Reply{Text: "ok"}
	}
	return Reply{Text: "ok: " + truncateRunes(last, 60)}
}

// Summary caps (see [Summarize]).
const (
	summaryMaxLines    = 40
	summaryMaxLineLen  = 200
	summaryMaxTotalLen = 4000
)

var (
	// identRe matches identifier-like tokens: snake_case, camelCase,
	// PascalCase with an inner capital, or dotted/called names (a.b, f()).
	identRe = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]*|[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*|[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*\(\)`)
	// pathRe matches file paths: a slash between name characters, or a name
	// with a short extension.
	pathRe = regexp.MustCompile(`[A-Za-z0-9_.~-]*/[A-Za-z0-9_.-]+|\b[A-Za-z0-9_-]+\.[a-z][a-z0-9]{0,4}\b`)
)

// Summarize is the deterministic extractive summary the server answers a
// summarization request with. The rule: split input into lines; keep each
// trimmed, non-empty line that contains a digit, an identifier-like token
// (snake_case, camelCase, a.b, f()) or a file path (a/b, name.ext), skipping
// lines that carry a summarization marker and repeats; cut each kept line to
// 200 characters; prefix it with "- "; stop after 40 lines or 4000 characters.
// When no line qualifies the summary is "- (nothing notable)".
func Summarize(input string) string {
	var b strings.Builder
	seen := map[string]bool{}
	n := 0
	for line := range strings.Lines(input) {
		line = strings.TrimSpace(line)
		if line == "" || seen[line] || hasMarker(line) || !notable(line) {
			continue
		}
		seen[line] = true
		entry := "- " + truncateRunes(line, summaryMaxLineLen)
		if b.Len()+len(entry)+1 > summaryMaxTotalLen {
			break
		}
		if n > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(entry)
		n++
		if n == summaryMaxLines {
			break
		}
	}
	if n == 0 {
		return "- (nothing notable)"
	}
	return b.String()
}

func notable(line string) bool {
	return strings.IndexFunc(line, unicode.IsDigit) >= 0 || identRe.MatchString(line) || pathRe.MatchString(line)
}

// truncateRunes returns s cut to at most n runes.
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// contentText returns the text of a message content in either API's shape:
// a string, or an array of parts/blocks (text, tool_result content, tool_use
// input, OpenAI function arguments).
func contentText(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			if t := partText(p); t != "" {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, "\n")
	case map[string]any:
		return partText(c)
	}
	return ""
}

func partText(p any) string {
	m, ok := p.(map[string]any)
	if !ok {
		if s, ok := p.(string); ok {
			return s
		}
		return ""
	}
	switch {
	case m["text"] != nil:
		s, _ := m["text"].(string)
		return s
	case m["content"] != nil: // Anthropic tool_result
		return contentText(m["content"])
	case m["input"] != nil: // Anthropic tool_use
		return compactJSON(m["input"])
	case m["function"] != nil: // OpenAI tool call
		f, _ := m["function"].(map[string]any)
		name, _ := f["name"].(string)
		args, _ := f["arguments"].(string)
		return name + " " + args
	}
	return ""
}

// userText returns only the text parts of a message content, for LastUserText.
func userText(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			if m, ok := p.(map[string]any); ok && m["type"] == "text" {
				if s, ok := m["text"].(string); ok && s != "" {
					parts = append(parts, s)
				}
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

// roughTokens estimates a token count: one token per four bytes, rounded up.
func roughTokens(s string) int {
	return (len(s) + 3) / 4
}

// mapStopReason translates a neutral or foreign stop reason to api's value.
func mapStopReason(api, reason string) string {
	openai := map[string]string{"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
	anthropic := map[string]string{"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
	table := openai
	if api == APIAnthropic {
		table = anthropic
	}
	if v, ok := table[reason]; ok {
		return v
	}
	return reason
}
