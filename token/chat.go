package token

import (
	"encoding/json"

	"github.com/mnemehq/mneme/message"
)

// Chat-format accounting. OpenAI documents (openai-cookbook, "How to count
// tokens with tiktoken") that every message costs 3 tokens of framing plus
// the tokens of its role and content, a name 1 more plus its own tokens,
// and every reply is primed with 3 tokens. Anthropic does not document its
// framing; these constants are at least as large as what its count_tokens
// endpoint reports for the same shapes, and the Claude estimator already
// over-counts the content.
const (
	// TokensPerMessage is the framing of one message.
	TokensPerMessage = 3
	// TokensPerName is the extra cost of a message's name field.
	TokensPerName = 1
	// ReplyPrimerTokens primes the assistant's reply.
	ReplyPrimerTokens = 3
	// ToolCallOverhead is the framing of one tool call besides its id, name
	// and arguments (the function wrapper and the separators).
	ToolCallOverhead = 8
	// ToolResultOverhead is the framing of one tool result besides its id
	// and content.
	ToolResultOverhead = 4
	// ImageTokens is charged for every image, whatever its size: OpenAI's
	// high-detail tiling costs at most 85+170*8 = 1445 tokens (gpt-4o) and
	// patch-based models cap at 1536 patches; Anthropic's cost is about
	// width*height/750, about 1600 at its largest unscaled size (1.15
	// megapixels); Gemini charges 258 per 768-pixel tile. The size is not
	// known without decoding the image, so the largest is charged.
	ImageTokens = 1600
	// ToolsPreambleTokens is charged once when a request declares tools:
	// Anthropic documents a tool-use system prompt of up to 346 tokens
	// (Claude 3.7 and 4 models); OpenAI's injected functions namespace is
	// smaller.
	ToolsPreambleTokens = 346
	// ToolSchemaOverhead is the framing of one tool schema besides its JSON
	// text.
	ToolSchemaOverhead = 10
)

// ReplyPrimer returns the tokens every request spends priming the reply.
func ReplyPrimer() int { return ReplyPrimerTokens }

// TextTokens returns the tokens of a bare text under c (a system prompt
// part, a preview, a summary) without any message framing.
func TextTokens(c Counter, s string) int { return c.Count(s) }

// MessageTokens returns the tokens m occupies in a chat request under c:
// framing, role, name, and every part. It never returns less than the
// message costs under OpenAI's documented accounting.
func MessageTokens(c Counter, m message.Message) int {
	n := TokensPerMessage + c.Count(string(m.Role))
	if m.Name != "" {
		n += TokensPerName + c.Count(m.Name)
	}
	return n + partsTokens(c, m.Parts)
}

func partsTokens(c Counter, parts []message.Part) int {
	n := 0
	for _, p := range parts {
		n += partTokens(c, p)
	}
	return n
}

func partTokens(c Counter, p message.Part) int {
	switch p.Type {
	case message.Text:
		return c.Count(p.Text)
	case message.Image:
		return ImageTokens
	case message.ToolCall:
		return ToolCallOverhead + c.Count(p.ToolCallID) + c.Count(p.ToolName) + c.Count(p.Arguments)
	case message.ToolResult:
		return ToolResultOverhead + c.Count(p.ToolCallID) + partsTokens(c, p.Content)
	case message.Reasoning:
		// The thinking text, plus redacted thinking's data when present.
		return c.Count(p.Text) + c.Count(string(p.Raw))
	case message.Opaque:
		return c.Count(string(p.Raw))
	default:
		// A part type this package does not know yet: count all it holds.
		return c.Count(p.Text) + c.Count(p.Arguments) + c.Count(string(p.Raw)) + partsTokens(c, p.Content)
	}
}

// ToolsTokens returns the tokens of a request's tool (function) schemas:
// the JSON text of each, as sent, plus ToolSchemaOverhead each and
// ToolsPreambleTokens once. Providers render schemas more compactly than
// their JSON, so this over-counts.
func ToolsTokens(c Counter, tools []json.RawMessage) int {
	if len(tools) == 0 {
		return 0
	}
	n := ToolsPreambleTokens
	for _, t := range tools {
		n += ToolSchemaOverhead + c.Count(string(t))
	}
	return n
}
