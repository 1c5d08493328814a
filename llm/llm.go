package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/mnemehq/mneme/message"
)

// The APIs a Client speaks.
const (
	APIOpenAI    = "openai"
	APIAnthropic = "anthropic"
)

// AnthropicVersion is the anthropic-version header sent with every request.
const AnthropicVersion = "2023-06-01"

// maxBody bounds what a reply may weigh; a summary is far smaller.
const maxBody = 16 << 20

// Errors a Complete call returns (wrapped); callers test them with errors.Is.
var (
	// ErrMalformed: the reply was not the JSON the API promises.
	ErrMalformed = errors.New("llm: malformed reply")
	// ErrTruncated: the model stopped at max_tokens.
	ErrTruncated = errors.New("llm: reply truncated at max_tokens")
	// ErrConfig: the client cannot be built from its configuration.
	ErrConfig = errors.New("llm: invalid configuration")
)

// StatusError is a non-2xx answer of the endpoint.
type StatusError struct {
	Status int
	Body   string // the start of the body, for the log
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("llm: endpoint answered %d: %s", e.Status, e.Body)
}

// Request is one completion: a system prompt and messages.
type Request struct {
	System    string
	Messages  []message.Message
	MaxTokens int // required by Anthropic; default 4096
}

// Response is the model's text answer and what it cost.
type Response struct {
	Text         string
	Model        string // the model that answered, as the endpoint names it
	Stop         string // finish_reason / stop_reason
	InputTokens  int
	OutputTokens int
}

// Client completes one request. Implementations are safe for concurrent use.
type Client interface {
	Complete(ctx context.Context, r Request) (Response, error)
}

// Config selects and configures a client.
type Config struct {
	// API is APIOpenAI (default) or APIAnthropic.
	API string
	// URL is the endpoint's base URL: "https://api.openai.com",
	// "http://127.0.0.1:8089/v1" or the full path of the endpoint; the
	// client adds what is missing of /v1/chat/completions or /v1/messages.
	URL string
	// Model is sent as the request's model.
	Model string
	// APIKey is sent as a bearer token (OpenAI) or x-api-key (Anthropic).
	APIKey string
	// HTTPClient defaults to http.DefaultClient; deadlines come from ctx.
	HTTPClient *http.Client
}

// New returns the client cfg describes.
func New(cfg Config) (Client, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("%w: no URL", ErrConfig)
	}
	if cfg.Model == "" {
		return nil, fmt.Errorf("%w: no model", ErrConfig)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	switch strings.ToLower(cfg.API) {
	case "", APIOpenAI:
		return &openAI{url: endpoint(cfg.URL, "/chat/completions"), model: cfg.Model, key: cfg.APIKey, hc: hc}, nil
	case APIAnthropic:
		return &anthropic{url: endpoint(cfg.URL, "/messages"), model: cfg.Model, key: cfg.APIKey, hc: hc}, nil
	}
	return nil, fmt.Errorf("%w: api %q: want openai or anthropic", ErrConfig, cfg.API)
}

// endpoint completes a base URL with /v1 and the route.
func endpoint(base, route string) string {
	base = strings.TrimRight(base, "/")
	switch {
	case strings.HasSuffix(base, route):
		return base
	case strings.HasSuffix(base, "/v1"):
		return base + route
	}
	return base + "/v1" + route
}

func maxTokens(r Request) int {
	if r.MaxTokens > 0 {
		return r.MaxTokens
	}
	return 4096
}

// post sends body and returns the reply's body, or a *StatusError.
func post(ctx context.Context, hc *http.Client, url string, body []byte, header http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{Status: resp.StatusCode, Body: clip(string(b), 300)}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading the body: %w", ErrMalformed, err)
	}
	return b, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

type openAI struct {
	url, model, key string
	hc              *http.Client
}

func (c *openAI) Complete(ctx context.Context, r Request) (Response, error) {
	ms := r.Messages
	if r.System != "" {
		ms = append([]message.Message{message.NewText(message.System, r.System)}, ms...)
	}
	msgs, err := message.EncodeOpenAIMessages(ms)
	if err != nil {
		return Response{}, fmt.Errorf("llm: encoding the request: %w", err)
	}
	body, err := json.Marshal(struct {
		Model       string          `json:"model"`
		Messages    json.RawMessage `json:"messages"`
		MaxTokens   int             `json:"max_tokens"`
		Temperature float64         `json:"temperature"`
	}{c.model, msgs, maxTokens(r), 0})
	if err != nil {
		return Response{}, err
	}
	h := http.Header{}
	if c.key != "" {
		h.Set("Authorization", "Bearer "+c.key)
	}
	raw, err := post(ctx, c.hc, c.url, body, h)
	if err != nil {
		return Response{}, err
	}
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			Message      json.RawMessage `json:"message"`
			FinishReason string          `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return Response{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(out.Choices) == 0 {
		return Response{}, fmt.Errorf("%w: no choices", ErrMalformed)
	}
	m, err := message.DecodeOpenAI(out.Choices[0].Message)
	if err != nil {
		return Response{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	res := Response{Text: m.TextOf(), Model: out.Model, Stop: out.Choices[0].FinishReason, InputTokens: out.Usage.Prompt, OutputTokens: out.Usage.Completion}
	if res.Stop == "length" {
		return res, ErrTruncated
	}
	return res, nil
}

type anthropic struct {
	url, model, key string
	hc              *http.Client
}

func (c *anthropic) Complete(ctx context.Context, r Request) (Response, error) {
	ms := r.Messages
	if r.System != "" {
		ms = append([]message.Message{message.NewText(message.System, r.System)}, ms...)
	}
	system, msgs, err := message.EncodeAnthropicMessages(ms)
	if err != nil {
		return Response{}, fmt.Errorf("llm: encoding the request: %w", err)
	}
	body, err := json.Marshal(struct {
		Model       string          `json:"model"`
		System      json.RawMessage `json:"system,omitempty"`
		Messages    json.RawMessage `json:"messages"`
		MaxTokens   int             `json:"max_tokens"`
		Temperature float64         `json:"temperature"`
	}{c.model, system, msgs, maxTokens(r), 0})
	if err != nil {
		return Response{}, err
	}
	h := http.Header{}
	h.Set("anthropic-version", AnthropicVersion)
	if c.key != "" {
		h.Set("x-api-key", c.key)
	}
	raw, err := post(ctx, c.hc, c.url, body, h)
	if err != nil {
		return Response{}, err
	}
	var out struct {
		Type       string          `json:"type"`
		Model      string          `json:"model"`
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		StopReason string          `json:"stop_reason"`
		Usage      struct {
			Input  int `json:"input_tokens"`
			Output int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return Response{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if out.Type != "message" || out.Role != "assistant" || len(out.Content) == 0 {
		return Response{}, fmt.Errorf("%w: not an assistant message", ErrMalformed)
	}
	m, err := message.DecodeAnthropic(messageObject(out.Role, out.Content))
	if err != nil {
		return Response{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	res := Response{Text: m.TextOf(), Model: out.Model, Stop: out.StopReason, InputTokens: out.Usage.Input, OutputTokens: out.Usage.Output}
	if res.Stop == "max_tokens" {
		return res, ErrTruncated
	}
	return res, nil
}

// messageObject rebuilds a message object from a reply's role and content, so
// the message codec sees exactly the shape it decodes.
func messageObject(role string, content json.RawMessage) []byte {
	b, _ := json.Marshal(struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}{role, content})
	return b
}
