// Package metrics is Mneme's Prometheus instrumentation: the mneme_* series
// that `mneme serve` exposes at /metrics. It offers one Metrics value with
// the collectors and the adapters that feed them: an HTTP middleware
// (requests by route and status), an http.RoundTripper (upstream latency), a
// store.Store wrapper (store latency) and the engine callbacks (window tokens,
// compactions by strategy and outcome, background jobs).
//
// It must not import the proxy, the server or any store backend: it sees the
// engine only through mneme.Config's callbacks and store.Store.
package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mnemehq/mneme"
)

// Metrics holds Mneme's collectors on their own registry. Create it once per
// process (or per test) with New; the zero value is not usable.
type Metrics struct {
	reg *prometheus.Registry

	requests        *prometheus.CounterVec   // route, method, status
	requestDuration *prometheus.HistogramVec // route
	upstream        *prometheus.HistogramVec // host, status
	windowTokens    prometheus.Histogram
	windowRatio     prometheus.Histogram
	compactions     *prometheus.CounterVec // strategy, outcome
	compactTokens   *prometheus.CounterVec // strategy, stage (before|after)
	reflections     *prometheus.CounterVec // outcome
	jobs            *prometheus.CounterVec // kind, outcome
	storeOps        *prometheus.HistogramVec

	mu      sync.Mutex
	running func() int
}

// New returns Metrics registered on a fresh registry, with the Go runtime
// and process collectors alongside.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mneme_http_requests_total",
			Help: "HTTP requests served, by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mneme_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request (to the last byte, streams included), by route pattern.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"route"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mneme_upstream_request_duration_seconds",
			Help:    "Latency of calls to the model APIs upstream, to the response headers, by host and status code (\"error\" when no response).",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320},
		}, []string{"host", "status"}),
		windowTokens: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mneme_window_tokens",
			Help:    "Tokens of each window built for a model call (system, tools, recall, head, memory, tail).",
			Buckets: prometheus.ExponentialBuckets(512, 2, 12), // 512 .. 1M
		}),
		windowRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mneme_window_budget_ratio",
			Help:    "Each window's tokens as a fraction of its usable budget.",
			Buckets: []float64{.1, .2, .3, .4, .5, .6, .7, .75, .8, .9, 1},
		}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mneme_compactions_total",
			Help: "Compactions, by strategy (observe, mask, archive) and outcome (ok, fallback, buffered).",
		}, []string{"strategy", "outcome"}),
		compactTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mneme_compaction_tokens_total",
			Help: "Tokens that left the window at compactions (stage=before) and what replaced them (stage=after), by strategy.",
		}, []string{"strategy", "stage"}),
		reflections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mneme_reflections_total",
			Help: "Reflections (observations condensed), by outcome (ok, fallback).",
		}, []string{"outcome"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mneme_background_jobs_total",
			Help: "Background work whose result reached a thread's log, by kind and outcome.",
		}, []string{"kind", "outcome"}),
		storeOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mneme_store_operation_duration_seconds",
			Help:    "Latency of store calls, by operation and outcome (ok, not_found, conflict, error).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"op", "outcome"}),
	}
	// Series that exist before their first event, so that dashboards and
	// alerts see a zero rather than nothing.
	for _, o := range []string{"ok", "fallback"} {
		m.reflections.WithLabelValues(o)
	}
	m.jobs.WithLabelValues("buffered_observation", "activated")
	reg.MustRegister(m.requests, m.requestDuration, m.upstream, m.windowTokens, m.windowRatio,
		m.compactions, m.compactTokens, m.reflections, m.jobs, m.storeOps,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mneme_background_jobs_running",
			Help: "Background jobs running now (observations buffered ahead of the trigger); -1 when the engine does not report it.",
		}, m.runningJobs),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry returns the registry the collectors are on, for tests and for
// adding more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format (GET
// /metrics).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SetRunningJobs gives the gauge mneme_background_jobs_running its source:
// a function that returns how many background jobs run now.
func (m *Metrics) SetRunningJobs(f func() int) {
	m.mu.Lock()
	m.running = f
	m.mu.Unlock()
}

func (m *Metrics) runningJobs() float64 {
	m.mu.Lock()
	f := m.running
	m.mu.Unlock()
	if f == nil {
		return -1
	}
	return float64(f())
}

// ObserveUsage records one window: the mneme.Config.OnUsage callback.
func (m *Metrics) ObserveUsage(_, _ string, u mneme.Usage) {
	m.windowTokens.Observe(float64(u.Total))
	if u.Budget > 0 {
		m.windowRatio.Observe(float64(u.Total) / float64(u.Budget))
	}
}

// ObserveCompaction records one compaction (and its reflection): the
// mneme.Config.OnCompact callback.
func (m *Metrics) ObserveCompaction(_, _ string, c mneme.CompactEvent) {
	if d := c.Compacted; d != nil {
		strategy := string(d.Strategy)
		if strategy == "" {
			strategy = "unknown"
		}
		outcome := "ok"
		switch {
		case d.Fallback != "":
			outcome = "fallback"
		case c.Buffered:
			outcome = "buffered"
		}
		m.compactions.WithLabelValues(strategy, outcome).Inc()
		m.compactTokens.WithLabelValues(strategy, "before").Add(float64(d.TokensBefore))
		m.compactTokens.WithLabelValues(strategy, "after").Add(float64(d.TokensAfter))
		if c.Buffered {
			m.jobs.WithLabelValues("buffered_observation", "activated").Inc()
		}
	} else if c.Masked > 0 {
		m.compactions.WithLabelValues("mask", "ok").Inc()
	}
	if r := c.Reflected; r != nil {
		outcome := "ok"
		if r.Fallback != "" {
			outcome = "fallback"
		}
		m.reflections.WithLabelValues(outcome).Inc()
	}
}

// Hooks returns OnUsage and OnCompact callbacks that feed m and then call
// next's (either may be nil), ready to set on mneme.Config.
func (m *Metrics) Hooks(next mneme.Config) (onUsage func(string, string, mneme.Usage), onCompact func(string, string, mneme.CompactEvent)) {
	nu, nc := next.OnUsage, next.OnCompact
	onUsage = func(tenant, thread string, u mneme.Usage) {
		m.ObserveUsage(tenant, thread, u)
		if nu != nil {
			nu(tenant, thread, u)
		}
	}
	onCompact = func(tenant, thread string, c mneme.CompactEvent) {
		m.ObserveCompaction(tenant, thread, c)
		if nc != nil {
			nc(tenant, thread, c)
		}
	}
	return onUsage, onCompact
}
