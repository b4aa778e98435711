package report_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stallwatch/stallwatch/report"
)

func writeHTMLFile(t *testing.T, c *report.Capture) string { return writeHTMLFileB(t, c) }

func writeHTMLFileB(t testing.TB, c *report.Capture) string {
	t.Helper()
	var buf bytes.Buffer
	if err := report.WriteHTML(&buf, c); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (b *browser) total() float64 {
	b.t.Helper()
	s := eval[string](b, `document.getElementById('sw-total').getAttribute('data-total')`)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		b.t.Fatalf("sw-total's data-total %q: %v", s, err)
	}
	return v
}

// TestPageInChromium drives the report of the fixture capture in a real
// browser: it loads without errors, search highlights a function and says
// its share, a click on a frame zooms to it, and the sample type switches
// the totals.
func TestPageInChromium(t *testing.T) {
	b := newBrowser(t, 1400, 1000)
	b.open(writeHTMLFile(t, report.FixtureCapture(t)))
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("the page logged errors: %v", errs)
	}

	// Wall time during the stall is the default: 91ms on a CPU and 18s off.
	if got := b.total(); got != 18091000 {
		t.Errorf("wall time during the stall: %vµs, want 18091000", got)
	}
	b.do("on-CPU", chromedp.Click(chromedp.CSS("#sw-mode-cpu")))
	if got := b.total(); got != 91000 {
		t.Errorf("on-CPU during the stall: %vµs, want 91000", got)
	}
	b.do("off-CPU", chromedp.Click(chromedp.CSS("#sw-mode-off")))
	if got := b.total(); got != 18000000 {
		t.Errorf("off-CPU during the stall: %vµs, want 18000000", got)
	}
	b.do("before", chromedp.Click(chromedp.CSS("#sw-phase-before")))
	if got := b.total(); got != 300000 {
		t.Errorf("off-CPU before the trigger: %vµs, want 300000", got)
	}
	b.do("wall, during", chromedp.Click(chromedp.CSS("#sw-mode-wall")), chromedp.Click(chromedp.CSS("#sw-phase-during")))

	// Search: lock_a's frames light up, and its share is tid 12's 5s of
	// 18.091s.
	b.do("search", chromedp.SendKeys(chromedp.CSS("#sw-search"), "lock_a\r"))
	matched := eval[[]string](b, `Array.from(document.querySelectorAll('#sw-flame .fr.match')).map(e => e.textContent)`)
	if len(matched) == 0 {
		t.Fatal("searching lock_a highlighted no frame")
	}
	for _, m := range matched {
		if m != "" && !strings.Contains(m, "lock_a") {
			t.Errorf("highlighted %q for lock_a", m)
		}
	}
	share := eval[string](b, `document.getElementById('sw-matched').getAttribute('data-share')`)
	if v, _ := strconv.ParseFloat(share, 64); math.Abs(v-5.0/18.091) > 0.001 {
		t.Errorf("lock_a's matched share %s, want %.4f; says %q", share, 5.0/18.091, b.text("#sw-matched"))
	}

	// A click on a frame zooms: it spans the whole width and the path
	// names it.
	fr := b.box(`Array.from(document.querySelectorAll('#sw-flame .fr')).find(e => e.textContent === 'read_block')`)
	if fr.W <= 0 {
		t.Fatal("no read_block frame drawn")
	}
	full := b.box(`document.getElementById('sw-flame')`)
	// (measured again: scrolling to the graph moved it)
	fr = b.box(`Array.from(document.querySelectorAll('#sw-flame .fr')).find(e => e.textContent === 'read_block')`)
	b.click(fr.X+fr.W/2, fr.Y+fr.H/2)
	after := b.box(`Array.from(document.querySelectorAll('#sw-flame .fr')).find(e => e.textContent === 'read_block')`)
	if after.W < full.W*0.95 {
		t.Errorf("after the click read_block is %.0fpx wide of %.0fpx; it should fill the graph", after.W, full.W)
	}
	if crumbs := b.text("#sw-crumbs"); !strings.HasSuffix(crumbs, "read_block") {
		t.Errorf("the path after the click is %q", crumbs)
	}
	b.screenshot("fixture-zoomed-1400.png")
	b.do("reset", chromedp.Click(chromedp.CSS("#sw-reset")))
	if crumbs := b.text("#sw-crumbs"); crumbs != "all" {
		t.Errorf("after reset the path is %q", crumbs)
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("the page logged errors: %v", errs)
	}
}
