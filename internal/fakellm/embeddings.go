package fakellm

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/mnemehq/mneme/embed"
)

// DefaultDimensions is the embedding size when a request gives none.
const DefaultDimensions = 64

// maxDimensions bounds the dimensions a request may ask for.
const maxDimensions = 8192

// Embed returns the deterministic hashing embedding of text with dims
// components (embed.DefaultHashingDims when dims < 1): embed.Hashing's,
// so a remote embedder pointed at this server and a local embed.Hashing of
// the same size give the same vectors by construction.
func Embed(text string, dims int) []float32 {
	vs, _ := embed.Hashing{Dims: dims}.Embed(context.Background(), []string{text}) // never fails
	return vs[0]
}

func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request, body []byte) {
	var in struct {
		Model          *string         `json:"model"`
		Input          json.RawMessage `json:"input"`
		Dimensions     *int            `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, APIOpenAI, http.StatusBadRequest, openAIBadJSON)
		return
	}
	if in.Model == nil || *in.Model == "" {
		writeError(w, APIOpenAI, http.StatusBadRequest, "you must provide a model parameter")
		return
	}
	if len(in.Input) == 0 || string(in.Input) == "null" {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, "Missing required parameter: 'input'.", "input", "missing_required_parameter")
		return
	}
	inputs, ok := embeddingInputs(in.Input)
	if !ok {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, "'$.input' is invalid. Please check the API reference.", "input", nil)
		return
	}
	dims := DefaultDimensions
	if in.Dimensions != nil {
		dims = *in.Dimensions
	}
	if dims < 1 || dims > maxDimensions {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, "Invalid value for 'dimensions': must be between 1 and "+strconv.Itoa(maxDimensions)+".", "dimensions", "invalid_value")
		return
	}
	if in.EncodingFormat != "" && in.EncodingFormat != "float" && in.EncodingFormat != "base64" {
		writeErrorParam(w, APIOpenAI, http.StatusBadRequest, "Invalid value: '"+in.EncodingFormat+"'. Supported values are: 'float' and 'base64'.", "encoding_format", "invalid_value")
		return
	}
	data := make([]any, len(inputs))
	tokens := 0
	for i, text := range inputs {
		vec := Embed(text, dims)
		tokens += roughTokens(text)
		var emb any = vec
		if in.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(vec))
			for j, x := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = object{{"object", "embedding"}, {"index", i}, {"embedding", emb}}
	}
	writeJSON(w, http.StatusOK, object{
		{"object", "list"}, {"data", data}, {"model", *in.Model},
		{"usage", object{{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
	})
}

// embeddingInputs reads input as a string, an array of strings, an array of
// token ids or an array of token-id arrays (token ids are embedded as their
// decimal text). Empty strings and empty arrays are invalid, as upstream.
func embeddingInputs(raw json.RawMessage) ([]string, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, one != ""
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, s := range many {
			if s == "" {
				return nil, false
			}
		}
		return many, len(many) > 0
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return []string{joinInts(ids)}, len(ids) > 0
	}
	var idLists [][]int
	if json.Unmarshal(raw, &idLists) == nil {
		out := make([]string, len(idLists))
		for i, l := range idLists {
			if len(l) == 0 {
				return nil, false
			}
			out[i] = joinInts(l)
		}
		return out, len(out) > 0
	}
	return nil, false
}

func joinInts(ids []int) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, " ")
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request, _ []byte) {
	if apiOf(r) == APIAnthropic {
		data := make([]any, len(s.cfg.models))
		for i, id := range s.cfg.models {
			data[i] = object{{"type", "model"}, {"id", id}, {"display_name", id}, {"created_at", "2025-01-01T00:00:00Z"}}
		}
		writeJSON(w, http.StatusOK, object{
			{"data", data}, {"has_more", false},
			{"first_id", s.cfg.models[0]}, {"last_id", s.cfg.models[len(s.cfg.models)-1]},
		})
		return
	}
	data := make([]any, len(s.cfg.models))
	for i, id := range s.cfg.models {
		data[i] = object{{"id", id}, {"object", "model"}, {"created", 1735689600}, {"owned_by", "fakellm"}}
	}
	writeJSON(w, http.StatusOK, object{{"object", "list"}, {"data", data}})
}
