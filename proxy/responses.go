package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	tenantpkg "github.com/mnemehq/mneme/tenant"
)

// The OpenAI Responses API (POST /v1/responses), managed like the other two
// model routes: the request's input items are the conversation (the
// "instructions" field is its system prompt, the pinned head), the window
// replaces them upstream, the output items are the recorded reply, and the
// recall tools are offered as function tools and answered here.
//
// Mneme names every response it returns with an id of its own (see
// responseID) and records it on the reply, so that previous_response_id is
// served from the log whatever the upstream keeps: it is never forwarded.

// responsesDialect speaks the Responses API. Unlike the other dialects it
// is made per request: it carries the response's id and what the recall
// rounds of one answer share (usage, the items the client has seen).
type responsesDialect struct {
	p *Proxy
	r *http.Request // the client's request: its tenant and thread header

	// id is the Mneme id of the response being made; set once the thread
	// and position are known.
	id string
	// prev is the resolved previous_response_id, when the request has one.
	prev *responseRef

	mu    sync.Mutex
	usage usageSum
	info  responseInfo
	// Streaming, across recall rounds: the output items the client has
	// received, and the next sequence_number it expects.
	sentItems  []json.RawMessage
	seq        int64
	seqEnd     int64
	seqStarted bool
	round      int
}

func (p *Proxy) newResponsesDialect(r *http.Request) *responsesDialect {
	return &responsesDialect{p: p, r: r}
}

func (d *responsesDialect) api() API     { return OpenAI }
func (d *responsesDialect) path() string { return "/v1/responses" }

// instructionsType marks the system message decoded from the request's
// instructions field: written back there, never into the input.
const instructionsType = "instructions"

func (d *responsesDialect) messages(req *object) ([]message.Message, error) {
	var msgs []message.Message
	// A request that continues a response brings only what is new: its
	// instructions go upstream as they are (the API does not carry them
	// over), and the thread's pinned head is in the log already.
	if v := req.get("instructions"); v != nil && string(v) != "null" && !d.continues(req) {
		s := req.str("instructions")
		if len(v) == 0 || v[0] != '"' {
			return nil, errors.New("instructions: want a string")
		}
		if s != "" {
			m := message.NewText(message.System, s)
			m.Wire = message.Wire{API: "responses", Type: instructionsType}
			msgs = append(msgs, m)
		}
	}
	raw := req.get("input")
	if raw == nil {
		if req.get("previous_response_id") == nil {
			return nil, errors.New("input: missing")
		}
		return msgs, nil
	}
	in, err := message.DecodeResponsesInput(raw)
	if err != nil {
		return nil, err
	}
	msgs = append(msgs, in...)
	if d.r != nil && !d.continues(req) && hasItemReference(msgs) {
		if err := d.resolveReferences(msgs); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

func hasItemReference(msgs []message.Message) bool {
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == message.Opaque && p.Wire.Type == "item_reference" {
				return true
			}
		}
	}
	return false
}

// resolveReferences replaces the item references of a resent history by
// the items the thread's log holds under those ids: a client with store
// on (the Vercel AI SDK's default) sends earlier output items by id only,
// and Mneme recorded them. References the log does not hold stay, for the
// upstream to resolve.
func (d *responsesDialect) resolveReferences(msgs []message.Message) error {
	ctx := d.r.Context()
	tenant := tenantpkg.Of(ctx)
	id := d.r.Header.Get(HeaderThread)
	if id == "" {
		id = d.r.Header.Get(HeaderThreadAlt)
	}
	if id == "" {
		id = DeriveThreadID(tenant, msgs)
	}
	if backend.CheckScope(tenant, id) != nil {
		return nil
	}
	evs, err := d.p.store.Load(ctx, tenant, id, 1, 0)
	if err != nil {
		return err
	}
	items := map[string][]message.Part{} // item id -> its parts
	for _, ev := range evs {
		if ev.Kind != store.KindMessage || ev.Message == nil || ev.Message.Role != message.Assistant {
			continue
		}
		var cur string
		for _, p := range ev.Message.Parts {
			switch {
			case p.Wire.Form == "part" && cur != "":
				items[cur] = append(items[cur], p)
				continue
			case p.Wire.Item != nil:
				cur = rawString(p.Wire.Item["id"])
			case p.Wire.Extra != nil:
				cur = rawString(p.Wire.Extra["id"])
			default:
				cur = ""
			}
			if cur != "" {
				items[cur] = append(items[cur], p)
			}
		}
	}
	for i := range msgs {
		m := &msgs[i]
		var parts []message.Part
		changed := false
		for _, p := range m.Parts {
			if p.Type == message.Opaque && p.Wire.Type == "item_reference" {
				var ref struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(p.Raw, &ref) == nil && items[ref.ID] != nil {
					parts = append(parts, items[ref.ID]...)
					changed = true
					continue
				}
			}
			parts = append(parts, p)
		}
		if changed {
			m.Parts = parts
		}
	}
	return nil
}

func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func (d *responsesDialect) build(req *object, win []message.Message, recall bool) ([]byte, error) {
	items := win
	for i := range win {
		if win[i].Wire.Type == instructionsType && win[i].Role == message.System {
			items = make([]message.Message, 0, len(win))
			for _, m := range win {
				if m.Wire.Type != instructionsType || m.Role != message.System {
					items = append(items, m)
				}
			}
			break
		}
	}
	input, err := message.EncodeResponsesInput(items)
	if err != nil {
		return nil, err
	}
	o := &object{fields: slices.Clone(req.fields)}
	o.set("input", input)
	// The window is the whole conversation: the upstream must not add
	// what it stored under an id.
	o.del("previous_response_id")
	if recall {
		o.set("tools", withResponsesRecallTools(req.get("tools")))
	}
	return o.bytes(), nil
}

// responsesRecallTools are the recall tools as Responses function tools,
// the same bytes on every call.
var responsesRecallTools = func() [][]byte {
	var out [][]byte
	for _, t := range recall.Tools(recall.RecallTools...) {
		name, _ := json.Marshal(t.Name)
		desc, _ := json.Marshal(t.Description)
		out = append(out, fmt.Appendf(nil, `{"type":"function","name":%s,"description":%s,"parameters":%s}`, name, desc, t.Schema))
	}
	return out
}()

func withResponsesRecallTools(tools []byte) []byte {
	var elems [][]byte
	for _, t := range splitArray(tools) {
		elems = append(elems, t)
	}
	return joinArray(append(elems, responsesRecallTools...)...)
}

// responseBody is what the proxy reads of a response object.
type responseBody struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	CreatedAt         json.RawMessage `json:"created_at"`
	Status            string          `json:"status"`
	Model             string          `json:"model"`
	Output            json.RawMessage `json:"output"`
	Usage             json.RawMessage `json:"usage"`
	Error             json.RawMessage `json:"error"`
	IncompleteDetails json.RawMessage `json:"incomplete_details"`
}

// responseInfo is what the log keeps of a response besides its output
// (Meta[MetaResponseInfo]), for GET /v1/responses/{id}.
type responseInfo struct {
	CreatedAt         json.RawMessage `json:"created_at,omitempty"`
	Status            string          `json:"status,omitempty"`
	Model             string          `json:"model,omitempty"`
	Usage             json.RawMessage `json:"usage,omitempty"`
	Error             json.RawMessage `json:"error,omitempty"`
	IncompleteDetails json.RawMessage `json:"incomplete_details,omitempty"`
	Previous          string          `json:"previous_response_id,omitempty"`
}

func (d *responsesDialect) reply(body []byte) (message.Message, error) {
	var r responseBody
	if err := json.Unmarshal(body, &r); err != nil {
		return message.Message{}, err
	}
	if r.Output == nil {
		return message.Message{}, errors.New("no output")
	}
	m, err := message.DecodeResponsesOutput(r.Output)
	if err != nil {
		return m, err
	}
	d.observe(r)
	return m, nil
}

// observe adds one round's usage and keeps what GET will show.
func (d *responsesDialect) observe(r responseBody) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.usage.add(r.Usage)
	d.info.CreatedAt = r.CreatedAt
	d.info.Status, d.info.Model = r.Status, r.Model
	d.info.Error, d.info.IncompleteDetails = nullToNil(r.Error), nullToNil(r.IncompleteDetails)
	d.info.Usage = d.usage.json()
}

func nullToNil(b json.RawMessage) json.RawMessage {
	if string(b) == "null" {
		return nil
	}
	return b
}

// strip takes the recall calls out of a response's output.
func (d *responsesDialect) strip(body []byte) ([]byte, error) {
	o, err := parseObject(body)
	if err != nil {
		return nil, err
	}
	o.set("output", stripRecallItems(o.get("output")))
	return o.bytes(), nil
}

// stripRecallItems drops the recall function calls from an output array.
func stripRecallItems(output []byte) []byte {
	var kept [][]byte
	for _, it := range splitArray(output) {
		if isRecallItem(it) {
			continue
		}
		kept = append(kept, it)
	}
	return joinArray(kept...)
}

func isRecallItem(item []byte) bool {
	var it struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	return json.Unmarshal(item, &it) == nil && it.Type == "function_call" && IsRecallTool(it.Name)
}

func (d *responsesDialect) results(calls []message.Part, texts []string) []message.Message {
	out := make([]message.Message, len(calls))
	for i, c := range calls {
		out[i] = message.Message{Role: message.Tool, Wire: message.Wire{API: "responses"}, Parts: []message.Part{{
			Type: message.ToolResult, ToolCallID: c.ToolCallID,
			Content: []message.Part{{Type: message.Text, Text: texts[i]}},
			Wire:    message.Wire{Type: "function_call_output", Form: "string"},
		}}}
	}
	return out
}

// tagReply marks the messages recorded for this response with its id, and
// the reply with what GET shows of it.
func (d *responsesDialect) tagReply(msgs []message.Message) {
	if d.id == "" {
		return
	}
	d.mu.Lock()
	info := d.info
	d.mu.Unlock()
	if d.prev != nil {
		info.Previous = d.prev.id
	}
	infoJSON, _ := json.Marshal(info)
	for i := range msgs {
		msgs[i].Meta = setMetaValue(msgs[i].Meta, MetaResponse, d.id)
		if i == 0 {
			msgs[i].Meta[MetaResponseInfo] = string(infoJSON)
		}
	}
}

// jsonQuote writes s as a JSON string.
func jsonQuote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

func setMetaValue(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// clientBody gives the client the response under Mneme's id, with the
// usage of every round it took.
func (d *responsesDialect) clientBody(body []byte) []byte {
	o, err := parseObject(body)
	if err != nil || d.id == "" {
		return body
	}
	o.set("id", []byte(jsonQuote(d.id)))
	d.mu.Lock()
	if d.usage.rounds > 1 {
		o.set("usage", d.usage.json())
	}
	d.mu.Unlock()
	if d.prev != nil && o.get("previous_response_id") != nil {
		o.set("previous_response_id", []byte(jsonQuote(d.prev.id)))
	}
	return o.bytes()
}

// usageSum adds the usage objects of the rounds of one answer.
type usageSum struct {
	rounds                            int
	input, cached, output, reasoning  int64
	total                             int64
	hasCached, hasReasoning, hasTotal bool
}

func (u *usageSum) add(raw json.RawMessage) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var v struct {
		Input  int64  `json:"input_tokens"`
		Output int64  `json:"output_tokens"`
		Total  *int64 `json:"total_tokens"`
		InputD *struct {
			Cached int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputD *struct {
			Reasoning int64 `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return
	}
	u.rounds++
	u.input += v.Input
	u.output += v.Output
	if v.Total != nil {
		u.total += *v.Total
		u.hasTotal = true
	} else {
		u.total += v.Input + v.Output
	}
	if v.InputD != nil {
		u.cached += v.InputD.Cached
		u.hasCached = true
	}
	if v.OutputD != nil {
		u.reasoning += v.OutputD.Reasoning
		u.hasReasoning = true
	}
}

func (u *usageSum) json() json.RawMessage {
	if u.rounds == 0 {
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}`,
		u.input, u.cached, u.output, u.reasoning, u.total)
	return b.Bytes()
}
