package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/status"
	"github.com/mnemehq/mneme/message"
	tenantpkg "github.com/mnemehq/mneme/tenant"
	"github.com/mnemehq/mneme/window"
)

// threadOpener is a dialect whose requests may name the thread and the
// position they continue (Responses' previous_response_id), and that names
// its responses once their thread and position are known.
type threadOpener interface {
	continues(req *object) bool
	openFrom(ctx context.Context, tenant string, req *object, msgs []message.Message, opts mneme.WindowOptions) (*session, *window.Window, error)
	opened(s *session, win *window.Window)
}

// replyNamer is a dialect that marks the recorded reply with its response's
// id and rewrites the body the client gets to carry it (Responses).
type replyNamer interface {
	tagReply(msgs []message.Message)
	clientBody(body []byte) []byte
}

// dialect is what differs between the two APIs: how a request's
// conversation is read and rewritten, how a reply is read, and how recall
// tool calls are taken out of what the client gets.
type dialect interface {
	api() API
	path() string
	// messages decodes the request's conversation; Anthropic's system
	// field comes first, as a system message.
	messages(req *object) ([]message.Message, error)
	// build returns the upstream body: req with the window in place of the
	// client's history, and the recall tools added when recall is set.
	build(req *object, win []message.Message, recall bool) ([]byte, error)
	// reply decodes a non-streamed response into the assistant message.
	reply(body []byte) (message.Message, error)
	// strip removes the recall tool calls from a non-streamed response; when
	// no tool call is left the stop reason becomes a normal end.
	strip(body []byte) ([]byte, error)
	// results returns the messages that carry the answers to calls.
	results(calls []message.Part, texts []string) []message.Message
	// newStream returns the state of one streamed round.
	newStream(c *streamCarry) streamState
}

// recordTimeout bounds writing a reply to the log once the client's
// request is over (a client that went away does not cancel the record).
const recordTimeout = 30 * time.Second

// exchange is one request on its way through the proxy.
type exchange struct {
	p      *Proxy
	w      http.ResponseWriter
	r      *http.Request
	d      dialect
	req    *object
	s      *session
	win    *window.Window
	rounds int
}

func (p *Proxy) serveChat(w http.ResponseWriter, r *http.Request, d dialect) {
	start := time.Now()
	api := d.api()
	tenant := tenantpkg.Of(r.Context())
	body, err := readBody(w, r, p.cfg.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, api, http.StatusRequestEntityTooLarge, "request body over "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
			return
		}
		writeError(w, api, http.StatusBadRequest, "could not read the request body: "+err.Error())
		return
	}
	req, err := p.checked.check(tenant, body)
	if err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	if req == nil {
		req, err = parseChecked(body)
	}
	if err == nil {
		err = checkFields(req)
	}
	if err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	msgs, err := d.messages(req)
	if err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	opener, _ := d.(threadOpener)
	continues := opener != nil && opener.continues(req)
	mode := r.Header.Get(HeaderMode)
	if continues {
		mode = ModeAppend // the request holds only what is new
	}
	switch mode {
	case "", ModeResend:
		mode = ModeResend
	case ModeAppend:
	default:
		writeError(w, api, http.StatusBadRequest, HeaderMode+": want resend or append, got "+strconv.Quote(mode))
		return
	}
	if err := checkConversation(msgs, mode, api); err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	id := r.Header.Get(HeaderThread)
	if id == "" {
		id = r.Header.Get(HeaderThreadAlt)
	}
	if id == "" && !continues {
		id = DeriveThreadID(tenant, msgs)
	}
	opts := mneme.WindowOptions{Tools: splitArray(req.get("tools")), Model: req.str("model")}
	if ph := r.Header.Get(HeaderPolicy); ph != "" {
		pol, err := p.m.Policy().MergeJSON([]byte(ph))
		if err != nil {
			writeError(w, api, http.StatusBadRequest, HeaderPolicy+": "+err.Error())
			return
		}
		opts.Policy = &pol
	}

	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.UpstreamTimeout)
	defer cancel()
	var s *session
	var win *window.Window
	if continues {
		s, win, err = opener.openFrom(ctx, tenant, req, msgs, opts)
	} else {
		s, win, err = p.open(ctx, tenant, id, mode, msgs, opts)
	}
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			ae.write(w)
			return
		}
		p.fail(w, r, api, err)
		return
	}
	defer s.turn.Close()
	if opener != nil {
		opener.opened(s, win)
	}
	x := &exchange{p: p, w: w, r: r.WithContext(ctx), d: d, req: req, s: s, win: win}
	x.setHeaders()
	status, err := x.run(ctx, req.boolean("stream"))
	if err != nil {
		status = p.fail(w, r, api, err)
	}
	// Attributes, not key-value pairs: one line per request, without
	// boxing each value.
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "proxy", slog.String("api", string(api)), slog.String("tenant", tenant),
		slog.String("thread", s.id), slog.Int("status", status), slog.Int("window_tokens", win.Usage.Total),
		slog.Int("budget", win.Usage.Budget), slog.Bool("compacted", win.Usage.Step), slog.Int("recall_rounds", x.rounds),
		slog.Int64("ms", time.Since(start).Milliseconds()))
}

// readBody reads a request body of at most limit bytes into one buffer of
// its declared length (io.ReadAll grows from 512 bytes, copying a large
// history a dozen times).
//
// A body its server read whole already (StoredBody) is taken as it is.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if sb, ok := r.Body.(interface{ StoredBody() []byte }); ok {
		b := sb.StoredBody()
		if int64(len(b)) > limit {
			return nil, &http.MaxBytesError{Limit: limit}
		}
		return b, nil
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		buf := bytes.NewBuffer(make([]byte, 0, n+bytes.MinRead))
		_, err := buf.ReadFrom(body)
		return buf.Bytes(), err
	}
	return io.ReadAll(body)
}

// parseChecked splits a body that passed checkBody into its fields: the
// body is known to be strict JSON, so nothing is validated again.
func parseChecked(body []byte) (*object, error) {
	req, err := parseObject(body)
	if err != nil {
		return nil, errNotObject // valid JSON, so not an object
	}
	return req, nil
}

func (x *exchange) setHeaders() {
	h := x.w.Header()
	u := x.win.Usage
	h.Set(HeaderThread, x.s.id)
	h.Set(HeaderWindow, strconv.Itoa(u.Total))
	h.Set(HeaderBudget, strconv.Itoa(u.Budget))
	h.Set(HeaderThreadTok, strconv.FormatInt(u.ThreadTokens, 10))
	h.Set(HeaderCompacted, strconv.FormatBool(u.Step))
	if f := x.s.forkedFrom(); f != "" {
		h.Set(HeaderForkedFrom, f)
	}
}

// offerRecall reports whether the recall tools go into the request:
// something is out of the window, or the window shows earlier recall calls
// (which some APIs accept only with the tools declared).
func (x *exchange) offerRecall() bool {
	if x.p.cfg.RecallRounds < 0 {
		return false
	}
	if x.win.NeedsRecall {
		return true
	}
	for i := range x.win.Messages {
		for _, pt := range x.win.Messages[i].Parts {
			if pt.Type == message.ToolCall && IsRecallTool(pt.ToolName) {
				return true
			}
		}
	}
	return false
}

// run calls the upstream, as many rounds as recall takes, and answers the
// client. It returns the status the client got, or an error before anything
// was written, which the caller maps (Proxy.fail).
func (x *exchange) run(ctx context.Context, stream bool) (int, error) {
	api := x.d.api()
	for {
		resp, err := x.call(ctx, api)
		if err != nil {
			return 0, err // a status.Upstream when sending failed
		}
		if resp.StatusCode != http.StatusOK {
			passThrough(x.w, resp)
			return resp.StatusCode, nil
		}
		if stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			return x.relay(ctx, resp), nil
		}
		// Not a stream (an upstream that ignored "stream"): read it whole.
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, &status.Upstream{Err: err}
		}
		reply, err := x.d.reply(body)
		if err != nil {
			// Not a reply this proxy can read: the client gets it as it
			// came, and the log keeps the request only.
			x.p.log.Warn("proxy: unreadable upstream reply", "api", api, "err", err)
			writeBody(x.w, resp, body)
			return resp.StatusCode, nil
		}
		calls, client := splitCalls(reply)
		again := len(calls) > 0 && client == 0 && x.rounds < x.p.cfg.RecallRounds
		if again {
			reply.Meta = setMeta(reply.Meta, MetaRecall)
		}
		var results []message.Message
		if len(calls) > 0 {
			if results, err = x.answer(ctx, calls); err != nil {
				return 0, err
			}
		}
		if !again {
			// I1: a reply the log could not keep is not acknowledged; the
			// client retries and the model answers again.
			if err := x.record(ctx, append([]message.Message{reply}, results...)...); err != nil {
				return 0, err
			}
			if len(calls) > 0 {
				if body, err = x.d.strip(body); err != nil {
					return 0, err
				}
			}
			writeBody(x.w, resp, x.clientBody(body))
			return resp.StatusCode, nil
		}
		x.rounds++
		if x.win, err = x.s.turn.Continue(ctx, append([]message.Message{reply}, results...)); err != nil {
			return 0, err
		}
	}
}

// call builds the upstream body and sends it: into a pooled buffer when
// the dialect writes into one (pooledBuilder). An error building is
// returned as it is; one sending, as a status.Upstream.
func (x *exchange) call(ctx context.Context, api API) (*http.Response, error) {
	var resp *http.Response
	var err error
	if pb, ok := x.d.(pooledBuilder); ok {
		s := getBody()
		defer s.release()
		if s.b, err = pb.buildInto(s.b, x.req, x.win.Messages, x.offerRecall()); err != nil {
			return nil, err
		}
		resp, err = x.p.sendPooled(ctx, x.r, api, x.d.path(), s)
	} else {
		var out []byte
		if out, err = x.d.build(x.req, x.win.Messages, x.offerRecall()); err != nil {
			return nil, err
		}
		resp, err = x.p.send(ctx, x.r, api, x.d.path(), out)
	}
	if err != nil {
		return nil, &status.Upstream{Err: err}
	}
	return resp, nil
}

// answer resolves recall calls; the results are marked as never seen by
// the client.
func (x *exchange) answer(ctx context.Context, calls []message.Part) ([]message.Message, error) {
	texts := make([]string, len(calls))
	for i, c := range calls {
		t, err := x.p.recall.answer(ctx, x.s.tenant, x.s.id, c.ToolName, c.Arguments)
		if err != nil {
			return nil, err
		}
		texts[i] = t
	}
	msgs := x.d.results(calls, texts)
	for i := range msgs {
		msgs[i].Meta = setMeta(msgs[i].Meta, MetaRecall)
	}
	return msgs, nil
}

// record appends the reply (and what goes with it) to the log before the
// client gets it, so that the client's next request finds it there.
func (x *exchange) record(ctx context.Context, msgs ...message.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if n, ok := x.d.(replyNamer); ok {
		n.tagReply(msgs)
	}
	_, err := x.s.turn.Record(ctx, msgs...)
	if errors.Is(err, mneme.ErrDeleted) {
		// The thread was deleted while the model answered: the reply
		// belongs to the deleted conversation and stays out of the log;
		// the client still gets it (its next request, carrying its own
		// history, begins the thread again).
		x.p.log.Info("proxy: thread deleted during the request; reply not recorded", "tenant", x.s.tenant, "thread", x.s.id)
		return nil
	}
	if err != nil {
		x.p.log.Error("proxy: recording the reply", "tenant", x.s.tenant, "thread", x.s.id, "err", err)
		return err
	}
	// A re-run learns its branch from its reply: a reply not yet written
	// to the client names it (a stream has sent its headers already).
	x.s.id = x.s.turn.Thread()
	x.w.Header().Set(HeaderThread, x.s.id)
	if f := x.s.forkedFrom(); f != "" {
		x.w.Header().Set(HeaderForkedFrom, f)
	}
	return nil
}

// clientBody is the reply body as the client gets it.
func (x *exchange) clientBody(body []byte) []byte {
	if n, ok := x.d.(replyNamer); ok {
		return n.clientBody(body)
	}
	return body
}

func setMeta(m map[string]string, key string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[key] = "true"
	return m
}

// splitCalls returns a reply's recall calls and the number of the
// client's own.
func splitCalls(m message.Message) (recall []message.Part, client int) {
	for _, p := range m.Parts {
		if p.Type != message.ToolCall {
			continue
		}
		if IsRecallTool(p.ToolName) {
			recall = append(recall, p)
		} else {
			client++
		}
	}
	return recall, client
}

// send makes one upstream call with the client's headers, minus those that
// belong to the hop and to Mneme, plus the server's key when it has one.
func (p *Proxy) send(ctx context.Context, in *http.Request, api API, path string, body []byte) (*http.Response, error) {
	out, err := p.newUpstreamRequest(ctx, in, api, path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	return p.client.Do(out)
}

// newUpstreamRequest is send's request, not yet sent.
func (p *Proxy) newUpstreamRequest(ctx context.Context, in *http.Request, api API, path string, body io.Reader) (*http.Request, error) {
	u := *p.upstreamFor(api)
	u.Path += path
	u.RawQuery = in.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, vs := range in.Header {
		if hopHeader(k) {
			continue
		}
		out.Header[k] = vs
	}
	stripMneme(out.Header)
	out.Header.Set("Content-Type", "application/json")
	p.setAuth(out.Header, api)
	return out, nil
}

// hopHeader reports headers that belong to one connection, or that the
// proxy sets itself.
func hopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Content-Length", "Host", "Accept-Encoding", "Content-Encoding":
		return true
	}
	return false
}

func copyHeaders(w http.ResponseWriter, resp *http.Response) {
	h := w.Header()
	for k, vs := range resp.Header {
		if hopHeader(k) {
			continue
		}
		h[k] = vs
	}
}

// passThrough gives the client an upstream error as it came.
func passThrough(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	copyHeaders(w, resp)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func writeBody(w http.ResponseWriter, resp *http.Response, body []byte) {
	copyHeaders(w, resp)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// splitArray returns the elements of a JSON array (nil for anything else).
func splitArray(b []byte) []json.RawMessage {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil
	}
	var out []json.RawMessage
	i = skipWS(b, i+1)
	for i < len(b) && b[i] != ']' {
		end := skipValue(b, i)
		out = append(out, json.RawMessage(b[i:end]))
		i = skipWS(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return out
}

// joinArray writes elements as a JSON array.
func joinArray(elems ...[]byte) []byte {
	n := 2
	for _, e := range elems {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// withRecallTools returns the request's tools array with the recall tools
// appended.
func withRecallTools(tools []byte, api API) []byte {
	var elems [][]byte
	for _, t := range splitArray(tools) {
		elems = append(elems, t)
	}
	return joinArray(append(elems, recallTools(api)...)...)
}
