package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/status"
	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	tenantpkg "github.com/mnemehq/mneme/tenant"
)

// Defaults of Config.
const (
	DefaultOpenAIUpstream    = "https://api.openai.com"
	DefaultAnthropicUpstream = "https://api.anthropic.com"
	DefaultMaxBodyBytes      = 32 << 20
	DefaultCacheBytes        = 128 << 20
	DefaultRecallRounds      = 4
	DefaultUpstreamTimeout   = 10 * time.Minute
)

// Request headers the proxy reads.
const (
	HeaderThread     = "X-Mneme-Thread"
	HeaderThreadAlt  = "Mneme-Thread"
	HeaderMode       = "X-Mneme-Mode"
	HeaderPolicy     = "X-Mneme-Policy"
	HeaderWindow     = "X-Mneme-Window-Tokens"
	HeaderBudget     = "X-Mneme-Window-Budget"
	HeaderThreadTok  = "X-Mneme-Thread-Tokens"
	HeaderCompacted  = "X-Mneme-Compacted"
	HeaderForkedFrom = "X-Mneme-Forked-From"
)

// Config configures a Proxy.
type Config struct {
	// Engine is the engine; required. The proxy reads and searches the
	// log through Engine.Store().
	Engine *mneme.Engine
	// OpenAIUpstream and AnthropicUpstream are the base URLs of the real
	// APIs (a trailing /v1 is accepted). Defaults: the public APIs.
	OpenAIUpstream    string
	AnthropicUpstream string
	// OpenAIKey and AnthropicKey, when set, replace whatever key the client
	// sent. When empty the client's key is forwarded (the server removes
	// the client's Mneme key first when it runs with auth).
	OpenAIKey    string
	AnthropicKey string
	// Client makes the upstream calls. Default: a client with no overall
	// timeout (streams are long) over a tuned transport.
	Client *http.Client
	// MaxBodyBytes bounds a request body (413 beyond). Default 32 MiB.
	MaxBodyBytes int64
	// RecallRounds bounds the recall loop of one request (default 4); a
	// negative value offers no recall tools.
	RecallRounds int
	// UpstreamTimeout bounds one request's whole exchange with the
	// upstream, recall rounds and stream included (504 beyond). Default 10m.
	UpstreamTimeout time.Duration
	// Logger for one line per request. Default slog.Default().
	Logger *slog.Logger
	// CacheBytes bounds the memory of the caches that let a resend
	// client's request cost what it adds: half for its messages decoded and
	// the window's encoded (message.Cache), half for the message elements
	// of bodies already checked. Default DefaultCacheBytes; a negative
	// value keeps no caches.
	CacheBytes int64
}

// Proxy serves the OpenAI and Anthropic routes. It is safe for concurrent
// use.
type Proxy struct {
	cfg       Config
	m         *mneme.Engine
	store     store.Store
	openai    *url.URL
	anthropic *url.URL
	client    *http.Client
	log       *slog.Logger
	recall    recaller
	forward   http.Handler
	// cache keeps the messages of recent requests decoded and of recent
	// windows encoded: a resend client's requests repeat them.
	cache *message.Cache
	// checked keeps the messages of bodies that passed checkBody, so that
	// a resend request's body is checked only where it is new.
	checked *checkedSet

	inflight sync.WaitGroup
}

// New returns a Proxy for cfg.
func New(cfg Config) (*Proxy, error) {
	if cfg.Engine == nil {
		return nil, errors.New("proxy: Config.Engine is required")
	}
	p := &Proxy{cfg: cfg, m: cfg.Engine, store: cfg.Engine.Store(), client: cfg.Client, log: cfg.Logger}
	if cfg.CacheBytes >= 0 {
		n := cmp.Or(cfg.CacheBytes, DefaultCacheBytes)
		p.cache = message.NewCache(int(max(n/2, 1)))
		p.checked = newCheckedSet(p.cache.Hash)
		p.checked.limit = int(max(n/4, 1))
	}
	var err error
	if p.openai, err = baseURL(cfg.OpenAIUpstream, DefaultOpenAIUpstream); err != nil {
		return nil, fmt.Errorf("proxy: openai upstream: %w", err)
	}
	if p.anthropic, err = baseURL(cfg.AnthropicUpstream, DefaultAnthropicUpstream); err != nil {
		return nil, fmt.Errorf("proxy: anthropic upstream: %w", err)
	}
	if p.cfg.MaxBodyBytes <= 0 {
		p.cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if p.cfg.RecallRounds == 0 {
		p.cfg.RecallRounds = DefaultRecallRounds
	}
	if p.cfg.UpstreamTimeout <= 0 {
		p.cfg.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.client == nil {
		p.client = &http.Client{Transport: NewTransport(p.cfg.UpstreamTimeout)}
	}
	p.recall = recaller{h: p.m.RecallHandler()}
	p.forward = &httputil.ReverseProxy{
		Rewrite:       p.rewriteForward,
		Transport:     p.client.Transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.fail(w, r, APIOf(r), &status.Upstream{Err: err})
		},
	}
	return p, nil
}

// NewTransport returns the transport upstream calls use by default: tuned
// for many concurrent streams to one host, and bounded by timeout until the
// response headers arrive. Wrap it (metrics) rather than copy it.
func NewTransport(timeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.ResponseHeaderTimeout = timeout
	return t
}

// baseURL parses an upstream base URL, dropping a trailing "/" and "/v1".
func baseURL(s, def string) (*url.URL, error) {
	if s == "" {
		s = def
	}
	u, err := url.Parse(strings.TrimSuffix(strings.TrimSuffix(s, "/"), "/v1"))
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%q: want http(s)://host[:port]", s)
	}
	return u, nil
}

// Handler returns the proxy's routes: POST /v1/chat/completions, POST
// /v1/messages, and every other /v1/* path forwarded as it is.
func (p *Proxy) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.inflight.Add(1)
		defer p.inflight.Done()
		switch {
		case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
			p.serveChat(w, r, openAIDialect{p.cache.For(tenantpkg.Of(r.Context()))})
		case r.URL.Path == "/v1/messages" && r.Method == http.MethodPost:
			p.serveChat(w, r, anthropicDialect{})
		case r.URL.Path == countTokensPath && r.Method == http.MethodPost:
			p.serveCountTokens(w, r)
		case r.URL.Path == "/v1/responses":
			p.serveResponses(w, r)
		case strings.HasPrefix(r.URL.Path, "/v1/responses/") && p.serveResponseByID(w, r):
		default:
			// Bounded like the model routes: a pass-through upstream that
			// stalls mid-body does not hold the request forever.
			ctx, cancel := context.WithTimeout(r.Context(), p.cfg.UpstreamTimeout)
			defer cancel()
			p.forward.ServeHTTP(w, r.WithContext(ctx))
		}
	})
}

// Wait blocks until the requests in flight have returned (their replies
// recorded): the server calls it during a graceful shutdown, after it has
// stopped accepting requests and before it closes the store.
func (p *Proxy) Wait() { p.inflight.Wait() }

// upstreamFor returns the base URL for an API.
func (p *Proxy) upstreamFor(api API) *url.URL {
	if api == Anthropic {
		return p.anthropic
	}
	return p.openai
}

// rewriteForward sends any other /v1/* request upstream unchanged but for
// the key the server config imposes.
func (p *Proxy) rewriteForward(pr *httputil.ProxyRequest) {
	api := APIOf(pr.In)
	pr.SetURL(p.upstreamFor(api))
	pr.Out.Host = pr.Out.URL.Host
	p.setAuth(pr.Out.Header, api)
	stripMneme(pr.Out.Header)
}

// setAuth puts the server's own upstream key on h, when it has one. The
// call is then the server's, not the client's: the client's cookies and
// the headers that choose a provider account or project are dropped, so a
// client cannot bill or reach another account with the server's key.
func (p *Proxy) setAuth(h http.Header, api API) {
	own := api == Anthropic && p.cfg.AnthropicKey != "" || api == OpenAI && p.cfg.OpenAIKey != ""
	if !own {
		return
	}
	for _, k := range accountHeaders {
		h.Del(k)
	}
	if api == Anthropic {
		h.Set("X-Api-Key", p.cfg.AnthropicKey)
	} else {
		h.Set("Authorization", "Bearer "+p.cfg.OpenAIKey)
	}
}

// accountHeaders are the client's credentials and account choices, which
// never go upstream with the server's key.
var accountHeaders = []string{
	"Authorization", "X-Api-Key", "Cookie", "Cookie2",
	"Openai-Organization", "Openai-Project", "Openai-Beta-Organization",
	"Anthropic-Organization", "Anthropic-Workspace", "X-Goog-User-Project",
}

func stripMneme(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, "X-Mneme-") || strings.HasPrefix(k, "Mneme-") {
			delete(h, k)
		}
	}
}
