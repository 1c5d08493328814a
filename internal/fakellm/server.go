package fakellm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxBodyBytes bounds a request body; larger bodies get a 413.
const maxBodyBytes = 32 << 20

// Option configures a [Server].
type Option func(*config)

type config struct {
	handler func(Request) Reply
	models  []string
}

// WithHandler sets the function that answers completion requests when the
// scripted queue is empty. Without it the default behaviour answers (see the
// package doc). It may be called concurrently.
func WithHandler(h func(Request) Reply) Option {
	return func(c *config) { c.handler = h }
}

// WithModels sets the model ids GET /v1/models lists.
func WithModels(ids ...string) Option {
	return func(c *config) { c.models = slices.Clone(ids) }
}

// Recorded is one request the server received.
type Recorded struct {
	API    string // APIOpenAI or APIAnthropic
	Method string
	Path   string
	Header http.Header
	Body   []byte
	Time   time.Time
}

// Server is a scripted OpenAI- and Anthropic-compatible model server. Its
// methods are safe for concurrent use.
type Server struct {
	cfg config

	mu       sync.Mutex
	queue    []Reply
	recorded []Recorded
	// Responses the API stored (store not false), by id, and their
	// output items by item id (for item_reference).
	stored      map[string]storedResponse
	storedItems map[string]json.RawMessage

	// Set by Start only.
	httpSrv  *http.Server
	url      string
	inflight sync.WaitGroup
	served   chan struct{}
}

// New returns a server that is not listening; serve its [Server.Handler]
// yourself. Most callers want [Start].
func New(opts ...Option) *Server {
	s := &Server{stored: map[string]storedResponse{}, storedItems: map[string]json.RawMessage{}}
	for _, o := range opts {
		o(&s.cfg)
	}
	if len(s.cfg.models) == 0 {
		s.cfg.models = []string{"gpt-4o-mini", "gpt-4o", "claude-sonnet-4-5", "claude-haiku-4-5", "text-embedding-3-small"}
	}
	return s
}

// Start returns a server listening on a random port of 127.0.0.1, like
// httptest.NewServer. It panics only if no loopback port can be had, as
// httptest does. Call Close when done.
func Start(opts ...Option) *Server {
	s := New(opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakellm: listen on loopback: %v", err))
	}
	s.url = "http://" + ln.Addr().String()
	s.httpSrv = &http.Server{Handler: s.trackInflight(s.Handler()), ReadHeaderTimeout: 10 * time.Second}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		_ = s.httpSrv.Serve(ln) // returns http.ErrServerClosed on Close
	}()
	return s
}

// URL returns the base URL, e.g. http://127.0.0.1:PORT. The OpenAI SDK's base
// URL is URL()+"/v1/"; the Anthropic SDK's is URL().
func (s *Server) URL() string { return s.url }

// Close stops a started server: it closes every connection and waits for the
// handlers to return.
func (s *Server) Close() {
	if s.httpSrv == nil {
		return
	}
	_ = s.httpSrv.Close()
	<-s.served
	s.inflight.Wait()
}

func (s *Server) trackInflight(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		h.ServeHTTP(w, r)
	})
}

// ListenAndServe serves a new server's routes on addr until ctx ends, then
// shuts down (gracefully for up to five seconds). It returns nil when stopped
// by ctx, or the listen or serve error.
func ListenAndServe(ctx context.Context, addr string, opts ...Option) error {
	s := New(opts...)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fakellm: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("fakellm: serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("fakellm: serve: %w", err)
	}
	return nil
}

// Enqueue appends scripted replies; successive completion requests (either
// API) consume them in order.
func (s *Server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// Pending returns how many scripted replies are still queued.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns a copy of every request received so far, in arrival order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Recorded, len(s.recorded))
	for i, r := range s.recorded {
		r.Header = r.Header.Clone()
		r.Body = slices.Clone(r.Body)
		out[i] = r
	}
	return out
}

// Reset forgets the recorded requests and the queued replies.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded = nil
	s.queue = nil
	s.stored = map[string]storedResponse{}
	s.storedItems = map[string]json.RawMessage{}
}

// next returns the reply for a completion request: the queue's head, else
// the handler's, else the default.
func (s *Server) next(req Request) Reply {
	s.mu.Lock()
	if len(s.queue) > 0 {
		r := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		return r
	}
	s.mu.Unlock()
	if s.cfg.handler != nil {
		return s.cfg.handler(req)
	}
	return DefaultReply(req)
}

// Handler returns the server's routes, recording every request.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	api := apiOf(r)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	s.mu.Lock()
	s.recorded = append(s.recorded, Recorded{API: api, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Time: time.Now()})
	s.mu.Unlock()
	if err != nil {
		writeError(w, api, http.StatusBadRequest, "could not read the request body: "+err.Error())
		return
	}
	if len(body) > maxBodyBytes {
		writeError(w, api, http.StatusRequestEntityTooLarge, "request body too large")
		return
	}

	type route struct {
		method string
		serve  func(http.ResponseWriter, *http.Request, []byte)
	}
	var rt route
	path := strings.TrimSuffix(r.URL.Path, "/")
	if strings.HasPrefix(path, "/v1/responses/") {
		path = "/v1/responses/{id}"
	}
	switch path {
	case "/v1/responses":
		rt = route{http.MethodPost, s.serveResponses}
	case "/v1/responses/{id}":
		rt = route{http.MethodGet, s.serveResponseGet}
	case "/v1/chat/completions":
		rt = route{http.MethodPost, s.serveChatCompletions}
	case "/v1/messages":
		rt = route{http.MethodPost, s.serveMessages}
	case "/v1/messages/count_tokens":
		rt = route{http.MethodPost, s.serveCountTokens}
	case "/v1/models":
		rt = route{http.MethodGet, s.serveModels}
	case "/v1/embeddings":
		rt = route{http.MethodPost, s.serveEmbeddings}
	default:
		writeNotFound(w, api, r)
		return
	}
	if r.Method != rt.method {
		writeError(w, api, http.StatusMethodNotAllowed, fmt.Sprintf("Method %s not allowed for %s", r.Method, r.URL.Path))
		return
	}
	rt.serve(w, r, body)
}

// apiOf tells which API a request speaks, by path, then by Anthropic's
// mandatory anthropic-version header.
func apiOf(r *http.Request) string {
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/messages"):
		return APIAnthropic
	case strings.HasPrefix(r.URL.Path, "/v1/chat/"), strings.HasPrefix(r.URL.Path, "/v1/embeddings"):
		return APIOpenAI
	case r.Header.Get("anthropic-version") != "":
		return APIAnthropic
	}
	return APIOpenAI
}

// wait sleeps for d unless ctx ends first; it reports whether the full delay
// passed.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newID returns prefix followed by 24 random base32 characters.
func newID(prefix string) string {
	return prefix + rand.Text()[:24]
}

func compactJSON(v any) string {
	b, err := marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// writeJSON sends v as a JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError sends the API's own error JSON.
func writeError(w http.ResponseWriter, api string, status int, msg string) {
	writeErrorParam(w, api, status, msg, nil, nil)
}

// writeErrorParam is writeError with OpenAI's param and code fields (nil for null).
func writeErrorParam(w http.ResponseWriter, api string, status int, msg string, param, code any) {
	if api == APIAnthropic {
		w.Header().Set("Request-Id", newID("req_"))
		writeJSON(w, status, object{
			{"type", "error"},
			{"error", object{{"type", anthropicErrorType(status)}, {"message", msg}}},
			{"request_id", w.Header().Get("Request-Id")},
		})
		return
	}
	w.Header().Set("X-Request-Id", newID("req_"))
	if code == nil {
		code = openAIErrorCode(status)
	}
	writeJSON(w, status, object{
		{"error", object{{"message", msg}, {"type", openAIErrorType(status)}, {"param", param}, {"code", code}}},
	})
}

func writeNotFound(w http.ResponseWriter, api string, r *http.Request) {
	if api == APIAnthropic {
		writeError(w, api, http.StatusNotFound, "Not Found")
		return
	}
	writeErrorParam(w, api, http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), nil, nil)
}

func anthropicErrorType(status int) string {
	switch status {
	case 400, 405, 422:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func openAIErrorType(status int) string {
	switch {
	case status == 429:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func openAIErrorCode(status int) any {
	switch status {
	case 401:
		return "invalid_api_key"
	case 429:
		return "rate_limit_exceeded"
	}
	return nil
}

// errorMessage is the default message of a scripted error status.
func errorMessage(status int) string {
	switch status {
	case 429:
		return "Rate limit reached (scripted by fakellm)."
	case 529:
		return "Overloaded (scripted by fakellm)."
	}
	if t := http.StatusText(status); t != "" {
		return t + " (scripted by fakellm)."
	}
	return fmt.Sprintf("Error %d (scripted by fakellm).", status)
}

// writeScriptedError sends a reply's error status, with its Body or the
// API's error JSON.
func writeScriptedError(w http.ResponseWriter, api string, rep Reply) {
	if rep.Status == http.StatusTooManyRequests || rep.Status == 529 || rep.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", fmt.Sprint(int(rep.RetryAfter.Round(time.Second)/time.Second)))
		w.Header().Set("Retry-After-Ms", fmt.Sprint(rep.RetryAfter.Milliseconds()))
	}
	if rep.Body == "" {
		writeError(w, api, rep.Status, errorMessage(rep.Status))
		return
	}
	ct := "application/json"
	if !json.Valid([]byte(rep.Body)) {
		ct = "text/plain; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(rep.Status)
	_, _ = io.WriteString(w, rep.Body)
}

// writeMalformed sends a 200 whose body is not valid JSON.
func writeMalformed(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, `{"id": "fake", "object": "chat.completion", "choices": [{"index": 0,`)
}

// writeCut sends the full Content-Length but only half of body, then drops
// the connection.
func writeCut(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body[:len(body)/2])
	abort(w)
}

// abort drops the connection without finishing the response, so the client
// sees an unexpected EOF. It hijacks the connection where it can; otherwise
// it aborts the handler the way net/http documents.
func abort(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// sse writes server-sent events, flushing after each, and counts them for
// CutAfter.
type sse struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	ctx      context.Context
	cutAfter int
	delay    time.Duration
	sent     int
	dead     bool
}

func newSSE(w http.ResponseWriter, r *http.Request, rep Reply) *sse {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	return &sse{w: w, rc: rc, ctx: r.Context(), cutAfter: rep.CutAfter, delay: rep.ChunkDelay}
}

// send writes one event (event may be empty for data-only streams). Once the
// stream was cut or the client left, it does nothing; it reports whether the
// stream is still alive.
func (s *sse) send(event, data string) bool {
	if s.dead {
		return false
	}
	if s.sent > 0 && !wait(s.ctx, s.delay) {
		s.dead = true
		return false
	}
	var b strings.Builder
	if event != "" {
		b.WriteString("event: " + event + "\n")
	}
	b.WriteString("data: " + data + "\n\n")
	if _, err := io.WriteString(s.w, b.String()); err != nil {
		s.dead = true
		return false
	}
	if err := s.rc.Flush(); err != nil {
		s.dead = true
		return false
	}
	s.sent++
	if s.cutAfter > 0 && s.sent >= s.cutAfter {
		s.dead = true
		abort(s.w)
		return false
	}
	return true
}

func (s *sse) sendJSON(event string, v any) bool {
	return s.send(event, compactJSON(v))
}

// splitChunks splits s into a few pieces on rune boundaries: pieces of about
// 16 bytes, at most about 64 of them.
func splitChunks(s string) []string {
	size := max(16, (len(s)+63)/64)
	var out []string
	for len(s) > size {
		n := size
		for n < len(s) && !isRuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
