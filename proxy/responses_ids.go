package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
	tenantpkg "github.com/mnemehq/mneme/tenant"
	"github.com/mnemehq/mneme/window"
)

// Response ids. Mneme names each response it returns
//
//	resp_<nonce><base64url(uvarint(from) ‖ thread)>
//
// where thread is the thread the response was recorded in, from the last
// seq of that thread when the request's input was in the log (the reply
// comes after it), and nonce 26 random characters. The reply's messages
// carry the whole id in Meta[MetaResponse]. Resolving an id loads the
// thread from `from` on and finds the messages that carry it: no table
// beside the log, nothing lost on a restart or on another replica, and an
// id proves itself, since only the client that got it knows the nonce the
// log holds. Lookups run in the requesting tenant's scope, so another
// tenant's id is unknown (I8). An HMAC over (thread, seq) would need a
// secret that outlives the process and is shared by replicas; the nonce in
// the log needs neither, and the id is known before the reply's seq is
// (streams send it in their first event).

// Meta keys of the messages recorded for a response.
const (
	// MetaResponse is the Mneme id of the response a message belongs to.
	MetaResponse = "mneme_response"
	// MetaResponseInfo, on the response's reply, is its status, model,
	// usage and creation time as JSON.
	MetaResponseInfo = "mneme_response_info"
)

const (
	responseIDPrefix = "resp_"
	nonceLen         = 26
)

// responseRef is a parsed response id.
type responseRef struct {
	id     string
	thread string
	from   int64
}

func newResponseID(thread string, from int64) string {
	payload := binary.AppendUvarint(nil, uint64(from))
	payload = append(payload, thread...)
	return responseIDPrefix + strings.ToLower(rand.Text()) + base64.RawURLEncoding.EncodeToString(payload)
}

func parseResponseID(id string) (*responseRef, bool) {
	rest, ok := strings.CutPrefix(id, responseIDPrefix)
	if !ok || len(rest) <= nonceLen {
		return nil, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(rest[nonceLen:])
	if err != nil {
		return nil, false
	}
	from, n := binary.Uvarint(payload)
	if n <= 0 || len(payload) == n {
		return nil, false
	}
	return &responseRef{id: id, thread: string(payload[n:]), from: int64(from)}, true
}

// recordedResponse is what the log holds of one response.
type recordedResponse struct {
	events []store.Event // the messages carrying the id
	pos    int64         // the seq of the last of them
	last   int64         // the thread's last seq
	moved  bool          // messages came after pos: continuing it is a branch
}

var errNoResponse = errors.New("proxy: no such response")

// findResponse loads what the log holds of a response; errNoResponse when
// the id was never issued to this tenant or was deleted.
func (p *Proxy) findResponse(ctx context.Context, tenant string, ref *responseRef) (*recordedResponse, error) {
	if backend.CheckScope(tenant, ref.thread) != nil {
		return nil, errNoResponse
	}
	evs, err := p.store.Load(ctx, tenant, ref.thread, ref.from+1, 0)
	if err != nil {
		return nil, err
	}
	rr := &recordedResponse{}
	for _, ev := range evs {
		rr.last = ev.Seq
		switch {
		case ev.Kind == store.KindNote && isDeletion(ev.Data, ref.id):
			return nil, errNoResponse
		case ev.Kind != store.KindMessage || ev.Message == nil:
		case ev.Message.Meta[MetaResponse] == ref.id:
			rr.events = append(rr.events, ev)
			rr.pos = ev.Seq
			rr.moved = false
		case rr.pos > 0:
			rr.moved = true
		}
	}
	if len(rr.events) == 0 {
		return nil, errNoResponse
	}
	return rr, nil
}

// deletionNote is the note DELETE /v1/responses/{id} appends.
type deletionNote struct {
	DeletedResponse string `json:"mneme_deleted_response"`
}

func isDeletion(data []byte, id string) bool {
	if !strings.Contains(string(data), "mneme_deleted_response") {
		return false
	}
	var n deletionNote
	return json.Unmarshal(data, &n) == nil && n.DeletedResponse == id
}

// apiError is an error answered in the OpenAI shape with its param and
// code, as the Responses API answers it.
type apiError struct {
	status           int
	msg, param, code string
}

func (e *apiError) Error() string { return e.msg }

func (e *apiError) write(w http.ResponseWriter) {
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": e.msg, "type": "invalid_request_error", "param": nullable(e.param), "code": nullable(e.code),
	}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

func responseNotFound(id, param string) *apiError {
	return &apiError{status: http.StatusNotFound, param: param, code: "previous_response_not_found",
		msg: fmt.Sprintf("Previous response with id '%s' not found.", id)}
}

// continues reports whether the request continues a response by id.
func (d *responsesDialect) continues(req *object) bool {
	v := req.get("previous_response_id")
	return v != nil && string(v) != "null"
}

// openFrom appends the request's new items after the response it
// continues and returns the window: in the response's thread when nothing
// came after it, else (a branch from an older response) in a new fork of
// that thread at the response (Thread.Fork). The engine checks the new
// function call outputs against the log: one whose call is not there is a
// 400 and nothing is logged.
func (d *responsesDialect) openFrom(ctx context.Context, tenant string, req *object, msgs []message.Message, opts mneme.WindowOptions) (*session, *window.Window, error) {
	p := d.p
	v := req.get("previous_response_id")
	if len(v) == 0 || v[0] != '"' {
		return nil, nil, &apiError{status: http.StatusBadRequest, param: "previous_response_id", msg: "previous_response_id: want a string"}
	}
	id := req.str("previous_response_id")
	ref, ok := parseResponseID(id)
	if !ok {
		return nil, nil, responseNotFound(id, "previous_response_id")
	}
	fresh := msgs // without the instructions (see messages)
	rr, err := p.findResponse(ctx, tenant, ref)
	if errors.Is(err, errNoResponse) {
		return nil, nil, responseNotFound(id, "previous_response_id")
	}
	if err != nil {
		return nil, nil, err
	}
	d.prev = ref
	t := p.m.Thread(tenant, ref.thread)
	parent := ""
	if rr.moved {
		parent = ref.thread
		// Every request continuing an older response is a branch of its
		// own: a fresh id, not one derived from the seq.
		if t, err = t.Fork(ctx, rr.pos, branchID(ref.thread)); err != nil {
			return nil, nil, err
		}
	}
	turn, err := t.AppendHistory(ctx, fresh, mneme.HistoryOptions{Window: opts, Append: true, Defer: true})
	if err != nil {
		return nil, nil, err
	}
	return &session{tenant: tenant, id: turn.Thread(), turn: turn, parent: parent}, turn.Window, nil
}

// branchID names a new branch of thread: random, since every request that
// continues an older response starts a branch of its own.
func branchID(thread string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := "~r" + hex.EncodeToString(b[:])
	if len(thread)+len(suffix) > 200 {
		s := sha256.Sum256([]byte(thread))
		thread = "f-" + hex.EncodeToString(s[:12])
	}
	return thread + suffix
}

// opened names the response once its thread and position are known.
func (d *responsesDialect) opened(s *session, win *window.Window) {
	d.id = newResponseID(s.id, win.Usage.LastSeq)
}

// serveResponseByID answers GET and DELETE /v1/responses/{id} for the
// responses Mneme recorded; any other id (and any other sub-path) is the
// upstream's business.
func (p *Proxy) serveResponseByID(w http.ResponseWriter, r *http.Request) bool {
	id, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/responses/"), "/")
	ref, ok := parseResponseID(id)
	if !ok {
		return false
	}
	tenant := tenantpkg.Of(r.Context())
	notFound := &apiError{status: http.StatusNotFound, code: "not_found",
		msg: fmt.Sprintf("Response with id '%s' not found.", id)}
	if rest != "" || r.Method != http.MethodGet && r.Method != http.MethodDelete {
		if rest == "" {
			writeError(w, OpenAI, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path)
			return true
		}
		notFound.write(w)
		return true
	}
	rr, err := p.findResponse(r.Context(), tenant, ref)
	if errors.Is(err, errNoResponse) {
		notFound.write(w)
		return true
	}
	if err != nil {
		p.fail(w, r, OpenAI, err)
		return true
	}
	if r.Method == http.MethodDelete {
		note, _ := json.Marshal(deletionNote{DeletedResponse: id})
		_, err := p.store.Append(r.Context(), tenant, ref.thread, rr.last, []store.Event{{Kind: store.KindNote, Data: note}})
		if errors.Is(err, store.ErrConflict) {
			// Appended meanwhile: the deletion still belongs at the end.
			var last int64
			if last, err = p.store.LastSeq(r.Context(), tenant, ref.thread); err == nil {
				_, err = p.store.Append(r.Context(), tenant, ref.thread, last, []store.Event{{Kind: store.KindNote, Data: note}})
			}
		}
		if err != nil {
			p.fail(w, r, OpenAI, err)
			return true
		}
		writeJSON(w, map[string]any{"id": id, "object": "response", "deleted": true})
		return true
	}
	body, err := responseObject(id, rr)
	if err != nil {
		p.fail(w, r, OpenAI, err)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// responseObject rebuilds a recorded response in the API's shape: its
// output is what the client was shown (recall calls left out).
func responseObject(id string, rr *recordedResponse) ([]byte, error) {
	var info responseInfo
	var out []json.RawMessage
	for _, ev := range rr.events {
		m := ev.Message
		if raw := m.Meta[MetaResponseInfo]; raw != "" {
			_ = json.Unmarshal([]byte(raw), &info)
		}
		if m.Role != message.Assistant {
			continue
		}
		items, err := message.EncodeResponsesOutput(*m)
		if err != nil {
			return nil, err
		}
		for _, it := range splitArray(items) {
			if !isRecallItem(it) {
				out = append(out, it)
			}
		}
	}
	o := &object{}
	set := func(k string, v []byte) {
		if v == nil {
			v = []byte("null")
		}
		o.set(k, v)
	}
	set("id", []byte(jsonQuote(id)))
	set("object", []byte(`"response"`))
	set("created_at", info.CreatedAt)
	status := info.Status
	if status == "" {
		status = "completed"
	}
	set("status", []byte(jsonQuote(status)))
	set("error", info.Error)
	set("incomplete_details", info.IncompleteDetails)
	set("model", []byte(jsonQuote(info.Model)))
	set("output", joinArray(rawSlices(out)...))
	var prev []byte
	if info.Previous != "" {
		prev = []byte(jsonQuote(info.Previous))
	}
	set("previous_response_id", prev)
	set("usage", info.Usage)
	return o.bytes(), nil
}

func rawSlices(rs []json.RawMessage) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = r
	}
	return out
}

// refuseUpgrade answers a WebSocket upgrade on /v1/responses with 426
// Upgrade Required: Mneme serves the Responses API over HTTP only, and
// 426 is what makes Codex fall back to HTTP at once rather than retry the
// handshake.
func refuseUpgrade(w http.ResponseWriter) {
	(&apiError{status: http.StatusUpgradeRequired, code: "websocket_not_supported",
		msg: "mneme serves the Responses API over HTTP only: POST /v1/responses"}).write(w)
}

// isUpgrade reports a WebSocket handshake.
func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") ||
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}

// serveResponses serves /v1/responses: POST creates a response; a
// WebSocket handshake is refused so that clients use HTTP.
func (p *Proxy) serveResponses(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost:
		p.serveChat(w, r, p.newResponsesDialect(r))
	case isUpgrade(r):
		refuseUpgrade(w)
	default:
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, OpenAI, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on /v1/responses: POST it")
	}
}
