package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium returns the path of Debian's chromium. It skips the test when
// there is none, except in CI, where scripts/test installs it and its
// absence is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (scripts/test installs it: apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed: apt-get install -y chromium")
	return ""
}

// TestInspectorInBrowser opens the inspector in headless Chromium after a
// long scripted session: it finds the thread through the filter, sees the
// compaction marks in the timeline and on the chart, runs a search, and
// saves a screenshot under the test's temp dir (MNEME_SCREENSHOT_DIR
// keeps a copy).
func TestInspectorInBrowser(t *testing.T) {
	exe := chromium(t)
	h := startObs(t, obsOpts{})
	h.session(t, "", "agent-run-long", 30)
	h.session(t, "", "other-run", 1)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(h.url+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	ctx, cancelRun := context.WithTimeout(bctx, 60*time.Second)
	defer cancelRun()

	// The thread list shows both threads; the filter narrows it to one.
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`a[data-thread="other-run"]`)),
		chromedp.SendKeys(chromedp.CSS("#thread-filter"), "long"),
	); err != nil {
		t.Fatalf("thread list: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#thread-list a").length === 1 && !!document.querySelector('a[data-thread="agent-run-long"]')`)); err != nil {
		t.Fatalf("the filter did not narrow the list to the thread: %v", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[data-thread="agent-run-long"]`)),
		chromedp.WaitVisible(chromedp.CSS("#usage-chart")),
	); err != nil {
		t.Fatalf("open thread: %v", err)
	}

	type view struct {
		Title        string         `json:"title"`
		Points       int            `json:"points"`
		Marks        int            `json:"marks"`
		Lines        []string       `json:"lines"`
		Forms        map[string]int `json:"forms"`
		Observations int            `json:"observations"`
		Compacted    int            `json:"compacted"`
		Rows         int            `json:"rows"`
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[view](`(() => {
		const forms = {};
		document.querySelectorAll("#timeline .badge").forEach(b => { forms[b.textContent] = (forms[b.textContent] || 0) + 1; });
		return {
			title: document.getElementById("thread-title").textContent,
			points: (document.querySelector("#usage-chart path.usage").getAttribute("d").match(/[ML]/g) || []).length,
			marks: document.querySelectorAll("#usage-chart circle.compaction").length,
			lines: [...document.querySelectorAll("#usage-chart line")].map(l => l.getAttribute("class")).filter(c => c !== "axis"),
			forms,
			observations: document.querySelectorAll("#observations li[data-from]").length,
			compacted: forms["compacted"] || 0,
			rows: document.querySelectorAll("#timeline tr").length,
		};
	})()`))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	t.Logf("page: %+v", v)
	if v.Title != "agent-run-long" {
		t.Errorf("title %q", v.Title)
	}
	if v.Points < 30 {
		t.Errorf("chart has %d points, want one per call (30)", v.Points)
	}
	if v.Marks < 1 {
		t.Error("no compaction marked on the chart")
	}
	if strings.Join(v.Lines, ",") != "budget,trigger,target" {
		t.Errorf("chart reference lines %v, want budget, trigger, target", v.Lines)
	}
	if v.Compacted < 1 || v.Observations < 1 {
		t.Errorf("compacted events in the timeline: %d, observations: %d; want some of each", v.Compacted, v.Observations)
	}
	if v.Forms["raw"] < 1 || v.Forms["catalogued"]+v.Forms["observed"]+v.Forms["masked"] < 1 {
		t.Errorf("timeline forms %v: want raw messages and compacted ones", v.Forms)
	}

	// A search finds the early trace id (long out of the window) and links
	// to its seq.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#search-input"), "checkout-failure-2026-03-15"),
		chromedp.Click(chromedp.CSS(`#search-form button[type="submit"]`)),
	); err != nil {
		t.Fatalf("search: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#search-results li[data-ref]").length > 0`)); err != nil {
		t.Fatalf("no search results: %v", err)
	}
	hit, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#search-results li[data-ref]")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hit, "checkout-failure-2026-03-15") {
		t.Errorf("first hit %q does not show the match", hit)
	}
	// Following the hit shows its row in the timeline.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#search-results li[data-ref] a"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!document.querySelector("#timeline tr.flash")`)); err != nil {
		t.Fatalf("the hit's row is not shown: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
		t.Fatal(err)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 10000 {
		t.Fatalf("screenshot of %d bytes: blank?", len(png))
	}
	top, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"inspector.png": png, "inspector-top.png": top} {
		for _, d := range []string{dir, os.Getenv("MNEME_SCREENSHOT_DIR")} {
			if d == "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("screenshots: %s (%d and %d bytes)", dir, len(png), len(top))
}
