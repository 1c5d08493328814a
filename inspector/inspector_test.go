package inspector_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/inspector"
)

func get(t *testing.T, srv *httptest.Server, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// assetRe finds the page's own assets: what index.html loads.
var assetRe = regexp.MustCompile(`(?:src|href)="(/[^"]*)"`)

// TestPage: the page at / with the headers that keep it from being framed
// or sniffed, and every asset it loads served from the binary with its
// type; nothing else under the prefix.
func TestPage(t *testing.T) {
	mux := http.NewServeMux()
	h := inspector.Handler()
	mux.Handle("GET /{$}", h)
	mux.Handle("GET "+inspector.Prefix, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, body := get(t, srv, "/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for k, want := range map[string]string{
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"Content-Security-Policy": "frame-ancestors 'none'",
	} {
		if !strings.Contains(resp.Header.Get(k), want) {
			t.Errorf("/: %s %q, want it to hold %q", k, resp.Header.Get(k), want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q lets scripts come from elsewhere", csp)
	}
	assets := assetRe.FindAllStringSubmatch(body, -1)
	if len(assets) < 2 {
		t.Fatalf("index.html loads %d assets of its own, want its script and style sheet", len(assets))
	}
	types := map[string]string{".js": "javascript", ".css": "text/css"}
	for _, a := range assets {
		p := a[1]
		if !strings.HasPrefix(p, inspector.Prefix) {
			t.Errorf("index.html loads %s, outside %s", p, inspector.Prefix)
			continue
		}
		resp, b := get(t, srv, p)
		if resp.StatusCode != 200 || len(b) == 0 {
			t.Errorf("%s: %d, %d bytes", p, resp.StatusCode, len(b))
		}
		for ext, typ := range types {
			if strings.HasSuffix(p, ext) && !strings.Contains(resp.Header.Get("Content-Type"), typ) {
				t.Errorf("%s: Content-Type %q, want %s", p, resp.Header.Get("Content-Type"), typ)
			}
		}
	}
	if resp, _ := get(t, srv, inspector.Prefix+"no-such-file.js"); resp.StatusCode != 404 {
		t.Errorf("a file the page does not have: %d, want 404", resp.StatusCode)
	}
}
