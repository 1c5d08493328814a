package embed

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

// OpenAI is an Embedder over an OpenAI-compatible POST {BaseURL}/embeddings
// endpoint (OpenAI, Azure-style gateways, vLLM, Ollama, LiteLLM, ...).
type OpenAI struct {
	// BaseURL is the API root including /v1, e.g. "https://api.openai.com/v1".
	BaseURL string
	// APIKey is sent as a Bearer token when set.
	APIKey string
	// EmbeddingModel is the model to ask for, e.g. "text-embedding-3-small".
	EmbeddingModel string
	// Dimensions, when > 0, asks the endpoint for shorter vectors.
	Dimensions int
	// Client is the HTTP client; nil means one with a 30 s timeout.
	Client *http.Client
	// MaxBatch bounds the texts per request (default 128).
	MaxBatch int
}

// Model implements Embedder: the model name, with the dimension when one
// is asked for (a shortened vector is another space).
func (o *OpenAI) Model() string {
	if o.Dimensions > 0 {
		return fmt.Sprintf("%s@%d", o.EmbeddingModel, o.Dimensions)
	}
	return o.EmbeddingModel
}

var defaultClient = &http.Client{Timeout: 30 * time.Second}

// maxResponseBytes bounds what one response may hold (128 texts × 8192
// dimensions as JSON floats fit with room to spare).
const maxResponseBytes = 64 << 20

// Embed implements Embedder, in batches of MaxBatch texts.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if o.EmbeddingModel == "" || o.BaseURL == "" {
		return nil, fmt.Errorf("%w: base URL and model are required", ErrEmbed)
	}
	batch := o.MaxBatch
	if batch <= 0 {
		batch = 128
	}
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += batch {
		vs, err := o.embedBatch(ctx, texts[start:min(len(texts), start+batch)])
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, nil
}

func (o *OpenAI) embedBatch(ctx context.Context, texts []string) ([][]float32, error) {
	// OpenAI rejects an empty input string: send a space instead.
	input := make([]string, len(texts))
	for i, t := range texts {
		if t == "" {
			t = " "
		}
		input[i] = t
	}
	req := struct {
		Model          string   `json:"model"`
		Input          []string `json:"input"`
		Dimensions     int      `json:"dimensions,omitempty"`
		EncodingFormat string   `json:"encoding_format"`
	}{o.EmbeddingModel, input, o.Dimensions, "base64"}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEmbed, err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(o.BaseURL, "/")+"/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEmbed, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	if o.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
	c := o.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEmbed, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading response: %v", ErrEmbed, err)
	}
	if len(raw) > maxResponseBytes {
		return nil, fmt.Errorf("%w: response larger than %d bytes", ErrEmbed, maxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: status %d: %s", ErrEmbed, resp.StatusCode, firstBytes(raw, 300))
	}
	var res struct {
		Data []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("%w: response is not JSON: %v", ErrEmbed, err)
	}
	if len(res.Data) != len(texts) {
		return nil, fmt.Errorf("%w: %d embeddings for %d inputs", ErrEmbed, len(res.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range res.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil {
			return nil, fmt.Errorf("%w: bad or repeated index %d", ErrEmbed, d.Index)
		}
		v, err := decodeEmbedding(d.Embedding)
		if err != nil {
			return nil, err
		}
		out[d.Index] = v
	}
	dims := len(out[0])
	for _, v := range out {
		if len(v) != dims || dims == 0 {
			return nil, fmt.Errorf("%w: empty or unequal embeddings", ErrEmbed)
		}
	}
	return out, nil
}

// decodeEmbedding reads a JSON array of numbers or a base64 string of
// little-endian float32s (what encoding_format=base64 returns).
func decodeEmbedding(raw json.RawMessage) ([]float32, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b)%4 != 0 {
			return nil, fmt.Errorf("%w: bad base64 embedding", ErrEmbed)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%w: embedding is neither an array nor base64", ErrEmbed)
	}
	return v, nil
}

func firstBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return strings.ToValidUTF8(string(b), "?")
}
