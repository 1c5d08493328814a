package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/mnemehq/mneme/api"
)

// openAPI is the part of docs/openapi.yaml the conformance test reads.
type openAPI struct {
	Paths      map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas   map[string]any `yaml:"schemas"`
		Responses map[string]any `yaml:"responses"`
	} `yaml:"components"`
}

func loadOpenAPI(t *testing.T) *openAPI {
	t.Helper()
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	return &doc
}

var httpMethods = []string{"get", "put", "post", "delete", "patch"}

// TestOpenAPIRoutesMatchHandlers: the documented paths and methods are
// exactly those the API registers.
func TestOpenAPIRoutesMatchHandlers(t *testing.T) {
	doc := loadOpenAPI(t)
	var documented, served []string
	for p, item := range doc.Paths {
		for _, m := range httpMethods {
			if _, ok := item[m]; ok {
				documented = append(documented, strings.ToUpper(m)+" "+p)
			}
		}
	}
	h := startObs(t, obsOpts{})
	a, err := api.New(api.Config{Engine: h.m})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range a.Routes() {
		served = append(served, r.Method+" "+r.Path)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Errorf("OpenAPI paths and API routes differ:\ndocumented: %v\nserved:     %v", documented, served)
	}
}

// TestOpenAPIResponsesMatchSchemas calls every route after a long session
// and checks each response against the schema documented for its status.
func TestOpenAPIResponsesMatchSchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	h := startObs(t, obsOpts{})
	h.session(t, "", "conf-1", 14)
	var ref string
	var firstSeq int64
	{
		_, b := h.do(t, "GET", "/api/threads/conf-1?limit=5", "", nil)
		var l api.ThreadLog
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Events {
			if e.Ref != "" {
				ref, firstSeq = e.Ref, e.Seq
				break
			}
		}
		if ref == "" {
			t.Fatal("no message event in the first page")
		}
	}
	_ = firstSeq
	ns := "ns=user&ns=prefs"
	calls := []struct {
		method, path, docPath, body string
		status                      int
	}{
		{"GET", "/api/threads", "/api/threads", "", 200},
		{"GET", "/api/threads?q=conf&limit=1", "/api/threads", "", 200},
		{"GET", "/api/threads?limit=0", "/api/threads", "", 400},
		{"GET", "/api/threads/conf-1?from=2&limit=50", "/api/threads/{id}", "", 200},
		{"GET", "/api/threads/nope", "/api/threads/{id}", "", 404},
		{"GET", "/api/threads/conf-1/window", "/api/threads/{id}/window", "", 200},
		{"GET", "/api/threads/conf-1/events", "/api/threads/{id}/events", "", 200},
		{"GET", "/api/threads/conf-1/usage", "/api/threads/{id}/usage", "", 200},
		{"GET", "/api/threads/conf-1/policy", "/api/threads/{id}/policy", "", 200},
		{"PUT", "/api/threads/conf-1/policy", "/api/threads/{id}/policy", `{"min_tail_turns": 3}`, 200},
		{"PUT", "/api/threads/conf-1/policy", "/api/threads/{id}/policy", `{"strategy": "nonsense"}`, 400},
		{"POST", "/api/threads/conf-1/compact", "/api/threads/{id}/compact", "", 200},
		{"GET", "/api/search?q=INV-4401", "/api/search", "", 200},
		{"GET", "/api/search?q=checkout-failure-2026-03-15&thread=conf-1", "/api/search", "", 200},
		{"GET", "/api/search?q=x&thread=nope", "/api/search", "", 404},
		{"GET", "/api/search", "/api/search", "", 400},
		{"GET", "/api/read/" + ref + "?limit=3", "/api/read/{ref}", "", 200},
		{"GET", "/api/read/m_000000000000000000000000", "/api/read/{ref}", "", 404},
		{"PUT", "/api/memory/item?" + ns + "&key=editor", "/api/memory/item", `{"value": {"editor": "helix", "theme": "dark"}}`, 200},
		{"PUT", "/api/memory/item?" + ns + "&key=lang", "/api/memory/item", `{"value": "go", "ttl_seconds": 3600}`, 200},
		{"PUT", "/api/memory/item?" + ns + "&key=bad", "/api/memory/item", `{"ttl_seconds": 5}`, 400},
		{"GET", "/api/memory/item?" + ns + "&key=editor", "/api/memory/item", "", 200},
		{"GET", "/api/memory?ns=user&q=helix", "/api/memory", "", 200},
		{"GET", "/api/memory?ns=user", "/api/memory", "", 200},
		{"GET", "/api/memory?filter=notjson", "/api/memory", "", 400},
		{"DELETE", "/api/memory/item?" + ns + "&key=editor", "/api/memory/item", "", 204},
		{"GET", "/api/memory/item?" + ns + "&key=editor", "/api/memory/item", "", 404},
		{"DELETE", "/api/memory?ns=user", "/api/memory", "", 200},
		{"DELETE", "/api/memory", "/api/memory", "", 400},
		{"GET", "/api/threads/conf-1/export", "/api/threads/{id}/export", "", 200},
		{"DELETE", "/api/threads/conf-1", "/api/threads/{id}", "", 204},
		{"DELETE", "/api/threads/conf-1", "/api/threads/{id}", "", 404},
	}
	for _, c := range calls {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			var body *bytes.Reader
			if c.body != "" {
				body = bytes.NewReader([]byte(c.body))
			}
			var status int
			var b []byte
			if body != nil {
				status, b = h.do(t, c.method, c.path, "", body)
			} else {
				status, b = h.do(t, c.method, c.path, "", nil)
			}
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, b)
			}
			op, ok := doc.Paths[c.docPath][strings.ToLower(c.method)].(map[string]any)
			if !ok {
				t.Fatalf("%s %s is not documented", c.method, c.docPath)
			}
			resp, ok := op["responses"].(map[string]any)[strconv.Itoa(status)].(map[string]any)
			if !ok {
				t.Fatalf("status %d of %s %s is not documented", status, c.method, c.docPath)
			}
			resp = doc.resolve(resp)
			content, _ := resp["content"].(map[string]any)
			if content == nil {
				if len(bytes.TrimSpace(b)) != 0 {
					t.Fatalf("documented without a body, got %s", b)
				}
				return
			}
			for mediaType, mt := range content {
				schema := mt.(map[string]any)["schema"]
				switch mediaType {
				case "application/json":
					var v any
					if err := json.Unmarshal(b, &v); err != nil {
						t.Fatalf("not JSON: %v: %s", err, b)
					}
					if err := doc.validate(schema, v, "$"); err != nil {
						t.Fatalf("response does not match the documented schema: %v\n%s", err, b)
					}
				case "application/x-ndjson":
					sc := bufio.NewScanner(bytes.NewReader(b))
					sc.Buffer(nil, 1<<24)
					n := 0
					for sc.Scan() {
						var v any
						if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
							t.Fatalf("line %d: %v", n+1, err)
						}
						if err := doc.validate(schema, v, fmt.Sprintf("line %d", n+1)); err != nil {
							t.Fatal(err)
						}
						n++
					}
					if n < 14*3 {
						t.Fatalf("export has %d lines, want the whole log", n)
					}
				default:
					t.Fatalf("unexpected media type %s", mediaType)
				}
			}
		})
	}
}

// resolve follows a $ref.
func (d *openAPI) resolve(v map[string]any) map[string]any {
	for {
		ref, ok := v["$ref"].(string)
		if !ok {
			return v
		}
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		var next any
		switch parts[0] {
		case "schemas":
			next = d.Components.Schemas[parts[1]]
		case "responses":
			next = d.Components.Responses[parts[1]]
		}
		m, ok := next.(map[string]any)
		if !ok {
			panic("unresolved " + ref)
		}
		v = m
	}
}

// validate checks v against a JSON Schema subset: $ref, type, enum,
// required, properties, additionalProperties (false or a schema), items.
func (d *openAPI) validate(schema any, v any, path string) error {
	s, ok := schema.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: bad schema %v", path, schema)
	}
	s = d.resolve(s)
	if enum, ok := s["enum"].([]any); ok && v != nil {
		if !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
			return fmt.Errorf("%s: %v not in %v", path, v, enum)
		}
	}
	switch s["type"] {
	case nil:
		return nil
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %T", path, v)
		}
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					return fmt.Errorf("%s: missing required %q", path, r)
				}
			}
		}
		for k, fv := range obj {
			if ps, ok := props[k]; ok {
				if err := d.validate(ps, fv, path+"."+k); err != nil {
					return err
				}
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: undocumented field %q", path, k)
				}
			case map[string]any:
				if err := d.validate(ap, fv, path+"."+k); err != nil {
					return err
				}
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array, got %T", path, v)
		}
		if items, ok := s["items"]; ok {
			for i, it := range arr {
				if err := d.validate(items, it, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: want a string, got %T", path, v)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Errorf("%s: want an integer, got %v", path, v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return fmt.Errorf("%s: want a number, got %T", path, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want a boolean, got %T", path, v)
		}
	}
	return nil
}

// TestAPITenantScope: tenant B sees nothing of tenant A, and A's thread is
// 404 for B exactly like a missing one.
func TestAPITenantScope(t *testing.T) {
	h := startObs(t, obsOpts{keys: map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"}})
	h.session(t, "key-a", "secret-thread", 10)
	_, b := h.do(t, "GET", "/api/threads/secret-thread?limit=3", "key-a", nil)
	var l api.ThreadLog
	if err := json.Unmarshal(b, &l); err != nil || len(l.Events) == 0 {
		t.Fatalf("tenant A cannot read its thread: %s", b)
	}
	aRef := l.Events[1].Ref
	if status, _ := h.do(t, "PUT", "/api/memory/item?ns=team&key=db", "key-a", strings.NewReader(`{"value":{"host":"db.internal"}}`)); status != 200 {
		t.Fatalf("put memory: %d", status)
	}

	paths := []string{"", "/window", "/events", "/usage", "/export", "/policy"}
	for _, p := range paths {
		sA, bA := h.do(t, "GET", "/api/threads/secret-thread"+p, "key-b", nil)
		sM, bM := h.do(t, "GET", "/api/threads/missing-thread"+p, "key-b", nil)
		if sA != http.StatusNotFound || sA != sM || !bytes.Equal(bA, bM) {
			t.Errorf("GET %s as B: %d %s; a missing thread: %d %s", p, sA, bA, sM, bM)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"DELETE", "/api/threads/secret-thread", ""},
		{"POST", "/api/threads/secret-thread/compact", ""},
		{"PUT", "/api/threads/secret-thread/policy", `{"min_tail_turns":2}`},
		{"GET", "/api/read/" + aRef, ""},
		{"GET", "/api/search?q=INV-4401&thread=secret-thread", ""},
		{"GET", "/api/memory/item?ns=team&key=db", ""},
	} {
		var body *strings.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		var status int
		var b []byte
		if body != nil {
			status, b = h.do(t, c.method, c.path, "key-b", body)
		} else {
			status, b = h.do(t, c.method, c.path, "key-b", nil)
		}
		if status != http.StatusNotFound {
			t.Errorf("%s %s as B: %d %s, want 404", c.method, c.path, status, b)
		}
	}
	for _, c := range []struct{ path, want string }{
		{"/api/threads", `{"threads":[]}`},
		{"/api/search?q=INV-4401", `{"hits":[]}`},
		{"/api/search?q=" + url.QueryEscape("checkout"), `{"hits":[]}`},
		{"/api/memory", `{"items":[]}`},
		{"/api/memory?q=db.internal", `{"items":[]}`},
	} {
		status, b := h.do(t, "GET", c.path, "key-b", nil)
		if status != 200 || strings.TrimSpace(string(b)) != c.want {
			t.Errorf("GET %s as B: %d %s, want %s", c.path, status, b, c.want)
		}
	}
	// And A still has everything.
	if status, b := h.do(t, "GET", "/api/search?q=INV-4401", "key-a", nil); status != 200 || !strings.Contains(string(b), "secret-thread") {
		t.Errorf("A's search: %d %s", status, b)
	}
	if status, _ := h.do(t, "GET", "/api/threads", "", nil); status != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", status)
	}
}

// TestMetricsAfterSession: /metrics exposes the mneme_* series after a
// session that compacts.
func TestMetricsAfterSession(t *testing.T) {
	h := startObs(t, obsOpts{})
	h.session(t, "", "metrics-1", 14)
	h.do(t, "GET", "/api/threads/metrics-1/events", "", nil)
	status, b := h.do(t, "GET", "/metrics", "", nil)
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	body := string(b)
	for _, want := range []string{
		`mneme_http_requests_total{method="POST",route="POST /v1/chat/completions",status="200"} 14`,
		`mneme_http_requests_total{method="GET",route="GET /api/threads/{id}/events",status="200"} 1`,
		`mneme_http_request_duration_seconds_count{route="POST /v1/chat/completions"} 14`,
		`mneme_upstream_request_duration_seconds_count{host="` + strings.TrimPrefix(h.llm.URL(), "http://") + `",status="200"} 14`,
		`mneme_window_tokens_count 14`,
		`mneme_window_budget_ratio_count 14`,
		`mneme_compactions_total{outcome="ok",strategy="mask"}`,
		`mneme_compaction_tokens_total{stage="before",strategy="mask"}`,
		`mneme_store_operation_duration_seconds_count{op="append",outcome="ok"}`,
		`mneme_store_operation_duration_seconds_count{op="load",outcome="ok"}`,
		"\nmneme_background_jobs_running ", // fed by the engine (server.New wires it)
		"# TYPE mneme_background_jobs_total counter",
		"# TYPE mneme_reflections_total counter",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "mneme_background_jobs_running -1") {
		t.Error("mneme_background_jobs_running has no source (-1)")
	}
}

// TestLogsKeepSecrets: with JSON logs at debug level, no API key (the
// client's Mneme key, a wrong key, the upstream key the server imposes)
// nor an Authorization header value appears in the logs.
func TestLogsKeepSecrets(t *testing.T) {
	const (
		clientKey   = "mk-client-secret-0d9f8e7c"
		wrongKey    = "mk-wrong-secret-5a4b3c2d"
		upstreamKey = "sk-upstream-secret-1a2b3c4d"
	)
	h := startObs(t, obsOpts{keys: map[string]string{clientKey: "tenant-a"}, openaiKey: upstreamKey})
	h.session(t, clientKey, "log-1", 6)
	h.do(t, "GET", "/api/threads/log-1/events", clientKey, nil)
	h.do(t, "GET", "/api/threads/log-1", wrongKey, nil)
	post(t, h.url+"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, map[string]string{"Authorization": "Bearer " + wrongKey})
	post(t, h.url+"/v1/chat/completions", `{not json`, map[string]string{"x-api-key": clientKey})
	// The upstream saw the imposed key: the secret did travel, just not to the logs.
	sawUpstream := false
	for _, r := range h.llm.Requests() {
		if strings.Contains(fmt.Sprint(r.Header), upstreamKey) {
			sawUpstream = true
		}
	}
	if !sawUpstream {
		t.Fatal("the upstream never received the imposed key: the test would prove nothing")
	}
	logs := h.logs.String()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) < 6 {
		t.Fatalf("only %d log lines: the test would prove nothing", len(lines))
	}
	for i, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("log line %d is not JSON: %s", i+1, l)
		}
	}
	for _, secret := range []string{clientKey, wrongKey, upstreamKey, "Bearer "} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs contain %q", secret)
		}
	}
}
