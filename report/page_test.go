package report_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
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

	// On-CPU time during the stall is the default (it was wall time,
	// where 18s of waits hid the 91ms that ran).
	if got := b.total(); got != 91000 {
		t.Errorf("the page opens on %vµs (%s), want on-CPU during the stall, 91000", got, b.text("#sw-total"))
	}
	b.do("wall", chromedp.Click(chromedp.CSS("#sw-mode-wall")))
	if got := b.total(); got != 18091000 {
		t.Errorf("wall time during the stall: %vµs, want 18091000", got)
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

// TestPageOpensOnWhatMatters: the first screen of report.html, in a real
// browser. The flame graph opens on on-CPU time during the stall, its
// first row the functions the stacks reached, never truncation markers
// (a stack cut short shows its outermost known frame, marked, the reason
// in its tooltip); the notes come after the findings, not in red above
// them; the timeline's legend names only the marks it draws (no
// "recovered" for a stall that did not end).
func TestPageOpensOnWhatMatters(t *testing.T) {
	b := newBrowser(t, 1400, 1000)
	b.open(writeHTMLFile(t, report.FixtureCaptureCut(t)))
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("the page logged errors: %v", errs)
	}
	if got := b.total(); got != 291000 {
		t.Errorf("the page opens on %vµs (%s), want on-CPU during the stall, 291000", got, b.text("#sw-total"))
	}
	if n := eval[int](b, `Array.from(document.querySelectorAll('#sw-flame .fr')).filter(e => e.textContent.startsWith('[truncated')).length`); n != 0 {
		t.Errorf("%d truncation markers drawn in the flame graph", n)
	}
	top := eval[[]string](b, `Array.from(document.querySelectorAll('#sw-flame .fr')).filter(e => e.style.top === '18px').map(e => e.textContent)`)
	if !slices.Contains(top, "spin") || !slices.Contains(top, "__clone3") {
		t.Errorf("the first row of the graph is %q, want __clone3 (whole stacks) and spin (callers unknown)", top)
	}
	cut := b.box(`document.querySelector('#sw-flame .fr.cut')`)
	if cut.W <= 0 {
		t.Fatal("no frame marked as having unknown callers")
	}
	b.hover(cut.X+cut.W/2, cut.Y+cut.H/2)
	b.waitAttr("#sw-tip", "style", func(v string) bool { return strings.Contains(v, "display: block") })
	if tip := b.text("#sw-tip"); !strings.Contains(tip, "callers unknown: [truncated: no unwind info in libfoo.so]") {
		t.Errorf("the cut frame's tooltip does not say why its callers are unknown:\n%s", tip)
	}
	// The notes: after the findings, none in the facts above them.
	order := eval[string](b, `(function(){var f=document.getElementById('findings'), n=document.getElementById('notes'); return f&&n ? (f.compareDocumentPosition(n) & Node.DOCUMENT_POSITION_FOLLOWING ? 'after' : 'before') : 'missing'})()`)
	if order != "after" {
		t.Errorf("the notes are %s the findings", order)
	}
	if red := eval[string](b, `Array.from(document.querySelectorAll('table.facts tr.warn')).map(e => e.textContent).join(' | ')`); strings.Contains(red, "sched is absent") {
		t.Errorf("a note is a red fact above the findings: %s", red)
	}
	legend := b.text("#sw-tl .legend")
	if strings.Contains(legend, "recovered") || !strings.Contains(legend, "trigger") || !strings.Contains(legend, "last beat") {
		t.Errorf("the timeline's legend of a stall not recovered: %q", legend)
	}
	b.screenshot("fixture-cut-1400.png")
}
