package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/metrics"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/window"
)

// TestStoreKeepsOptionalInterfaces: through the timing wrapper, store.As
// finds every optional interface a backend has, and none it lacks.
func TestStoreKeepsOptionalInterfaces(t *testing.T) {
	sq, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	bare := struct{ store.Store }{inmem.New()} // no optional interface at all
	for _, tc := range []struct {
		name string
		st   store.Store
	}{{"memory", inmem.New()}, {"sqlite", sq}, {"bare", bare}} {
		t.Run(tc.name, func(t *testing.T) {
			w := metrics.New().Store(tc.st)
			for _, c := range []struct {
				iface    string
				has, got bool
			}{
				{"Leaser", is[store.Leaser](tc.st), as[store.Leaser](w)},
				{"Vectors", is[store.Vectors](tc.st), as[store.Vectors](w)},
				{"TenantLister", is[store.TenantLister](tc.st), as[store.TenantLister](w)},
				{"Purger", is[store.Purger](tc.st), as[store.Purger](w)},
			} {
				if c.has != c.got {
					t.Errorf("%s: backend %v, wrapped %v", c.iface, c.has, c.got)
				}
			}
		})
	}
}

func is[T any](v any) bool { _, ok := v.(T); return ok }

func as[T any](st store.Store) bool { _, ok := store.As[T](st); return ok }

// TestStoreTimesCalls: each call lands in its op and outcome.
func TestStoreTimesCalls(t *testing.T) {
	m := metrics.New()
	st := m.Store(inmem.New())
	ctx := context.Background()
	if _, err := st.Thread(ctx, "t", "missing"); err == nil {
		t.Fatal("want not found")
	}
	if _, err := st.Append(ctx, "t", "th", 0, []store.Event{{Kind: store.KindNote, Data: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, "t", "th", 0, []store.Event{{Kind: store.KindNote, Data: []byte(`{}`)}}); err == nil {
		t.Fatal("want conflict")
	}
	body := scrape(t, m)
	for _, c := range []struct{ op, outcome string }{{"thread", "not_found"}, {"append", "ok"}, {"append", "conflict"}} {
		want := `mneme_store_operation_duration_seconds_count{op="` + c.op + `",outcome="` + c.outcome + `"} 1`
		if !strings.Contains(body, want) {
			t.Errorf("missing %s", want)
		}
	}
}

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestMiddleware: route patterns, never raw paths; the status as written;
// flushing passes through.
func TestMiddleware(t *testing.T) {
	m := metrics.New()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/threads/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "gone" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte("ok"))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
	})
	h := m.Middleware("", mux)
	for _, path := range []string{"/api/threads/a", "/api/threads/b", "/api/threads/gone", "/random/x1", "/random/x2"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	body := scrape(t, m)
	for _, want := range []string{
		`mneme_http_requests_total{method="GET",route="GET /api/threads/{id}",status="200"} 2`,
		`mneme_http_requests_total{method="GET",route="GET /api/threads/{id}",status="404"} 1`,
		`mneme_http_requests_total{method="GET",route="unmatched",status="404"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %s", want)
		}
	}
	if strings.Contains(body, "x1") {
		t.Error("a raw path reached a label")
	}
}

// TestCompactionOutcomes: strategy and outcome labels from the engine's
// compaction events.
func TestCompactionOutcomes(t *testing.T) {
	m := metrics.New()
	_, onCompact := m.Hooks(mneme.Config{})
	for _, c := range []mneme.CompactEvent{
		{Compacted: &window.CompactedData{Strategy: window.Observe, TokensBefore: 100, TokensAfter: 10}},
		{Compacted: &window.CompactedData{Strategy: window.Mask, Fallback: "compactor failed: timeout: catalogue"}},
		{Compacted: &window.CompactedData{Strategy: window.Observe}, Buffered: true},
		{Masked: 3},
		{Compacted: &window.CompactedData{Strategy: window.Observe}, Reflected: &window.ReflectedData{Fallback: "extractive"}},
	} {
		onCompact("t", "th", c)
	}
	body := scrape(t, m)
	for _, want := range []string{
		`mneme_compactions_total{outcome="ok",strategy="observe"} 2`,
		`mneme_compactions_total{outcome="fallback",strategy="mask"} 1`,
		`mneme_compactions_total{outcome="buffered",strategy="observe"} 1`,
		`mneme_compactions_total{outcome="ok",strategy="mask"} 1`,
		`mneme_background_jobs_total{kind="buffered_observation",outcome="activated"} 1`,
		`mneme_reflections_total{outcome="fallback"} 1`,
		`mneme_compaction_tokens_total{stage="before",strategy="observe"} 100`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %s", want)
		}
	}
}
