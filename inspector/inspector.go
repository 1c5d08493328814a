// Package inspector is the web page `mneme serve` shows at /: a thread list
// with search, and for each thread its log as a timeline (every message
// marked raw, evicted, masked, observed or catalogued), the observations
// with the ranges they cover, a chart of window tokens per call against the
// budget and the trigger, and archive search. It is plain HTML, CSS and
// JavaScript embedded in the binary: no framework, no CDN, no build step.
// The page reads everything from the JSON API (package api).
//
// The package must not import the engine or the store: it only serves
// files.
package inspector

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Prefix is where the page's assets are served.
const Prefix = "/inspector/"

// Handler serves the page at / and its assets under Prefix. Mount it
// public (the page asks for an API key when the API answers 401):
//
//	srv.HandlePublic("GET /{$}", h)
//	srv.HandlePublic("GET "+inspector.Prefix, h)
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	assets := http.StripPrefix(Prefix, http.FileServer(http.FS(sub)))
	index, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Cache-Control", "no-cache")
			_, _ = w.Write(index)
			return
		}
		assets.ServeHTTP(w, r)
	})
}
