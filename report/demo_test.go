package report_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/report"
)

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestDemo: the demo's report (testdata/captures/demo-deadlock, a capture
// of make demo's bank service kept by package analysis's scenarios),
// rendered from the stored files, in a real browser.
func TestDemo(t *testing.T) {
	dir := filepath.Join(testutil.Testdata(t, "captures"), "demo-deadlock")
	c, err := report.ReadCapture(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	tids := map[string]int{}
	for _, th := range c.Threads.Threads {
		tids[th.Name] = th.TID
	}
	page := filepath.Join(t.TempDir(), capdir.FileHTML)
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := report.WriteHTML(f, c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testDemoPage(t, page, tids)
}

// testDemoPage: the demo's report in a real browser shows the deadlocked
// threads blocked from before the trigger in the timeline, a time range
// selected there narrows the flame graph, and the page works at a laptop's
// half-width window too. Screenshots are kept as artifacts.
func testDemoPage(t *testing.T, page string, tids map[string]int) {
	b := newBrowser(t, 1400, 1000)
	for _, width := range []int{1400, 700} {
		t.Run(strconv.Itoa(width), func(t *testing.T) {
			b.t = t
			b.do("resizing", chromedp.EmulateViewport(int64(width), 1000))
			b.open(page)
			if errs := b.pageErrors(); len(errs) > 0 {
				t.Fatalf("the page logged errors: %v", errs)
			}
			// Nothing is wider than the window: the page reads at this width.
			if w := eval[float64](b, `document.documentElement.scrollWidth`); w > float64(width)+1 {
				t.Errorf("the page is %.0fpx wide in a %dpx window", w, width)
			}
			trig := eval[float64](b, `JSON.parse(document.getElementById('sw-data').textContent).triggerUs`)
			end := eval[float64](b, `JSON.parse(document.getElementById('sw-data').textContent).endUs`)
			if trig <= 0 {
				t.Fatalf("the page has no trigger time (%v)", trig)
			}
			for _, name := range []string{"transfer-c2s", "transfer-s2c"} {
				tid := tids[name]
				row := b.box(fmt.Sprintf(`document.querySelector('#sw-tl-labels [data-tid="%d"]')`, tid))
				if row.W <= 0 {
					t.Fatalf("no timeline row for %s (tid %d)", name, tid)
				}
				canvas := b.box(`document.getElementById('sw-timeline')`)
				row = b.box(fmt.Sprintf(`document.querySelector('#sw-tl-labels [data-tid="%d"]')`, tid))
				// The snapshot says since when it had been off the CPU: from
				// before the trigger. Point halfway from then (or the
				// window's start) to the trigger, or just after the
				// trigger when the window begins with it.
				since := eval[float64](b, fmt.Sprintf(`JSON.parse(document.getElementById('sw-data').textContent).threads.find(t => t.tid === %d).offSinceUs`, tid))
				if since >= trig {
					t.Fatalf("%s: off the CPU since %vµs, the trigger at %vµs: not blocked from before the trigger", name, since, trig)
				}
				at := (max(since, 0) + trig) / 2
				if trig-max(since, 0) < end/100 {
					at = trig + end/200
				}
				x := canvas.X + at/end*canvas.W
				hit := eval[string](b, fmt.Sprintf(`(function(){var e=document.elementFromPoint(%f,%f); return e?(e.id||e.className||e.tagName):"none"})()`, x, row.Y+row.H/2))
				if hit != "sw-timeline" {
					t.Fatalf("the point %.0f,%.0f (row %+v, canvas %+v) is on %q, not the timeline", x, row.Y+row.H/2, row, canvas, hit)
				}
				y := row.Y + row.H/2
				b.hover(x, y)
				// Chromium delivers mouse moves with the next frame: wait
				// for the tooltip to describe this point.
				canvas = b.rect(`document.getElementById('sw-timeline')`)
				b.waitAttr("#sw-tip", "data-at", func(v string) bool {
					var ax, ay float64
					fmt.Sscanf(v, "%f,%f", &ax, &ay)
					return math.Abs(ax-(x-canvas.X)) <= 2 && math.Abs(ay-(y-canvas.Y)) <= 2
				})
				state := eval[string](b, `document.getElementById('sw-tip').getAttribute('data-state')`)
				tip := b.text("#sw-tip")
				if state != "blocked" || !strings.Contains(tip, "off the CPU since -") || !strings.Contains(tip, "main.(*mutex).Lock") {
					t.Errorf("%s before the trigger: state %q, tooltip:\n%s", name, state, tip)
				}
			}
			// A range selected in the timeline filters the flame graph.
			before := b.total()
			canvas := b.box(`document.getElementById('sw-timeline')`)
			y := canvas.Y + 8
			b.drag(canvas.X+trig/end*canvas.W+2, y, canvas.X+canvas.W*0.98)
			after := b.total()
			if !(after > 0 && after < before) {
				t.Errorf("selecting the time after the trigger: total %v → %v; it should narrow", before, after)
			}
			if chips := b.text("#sw-chips"); !strings.Contains(chips, "time") {
				t.Errorf("no time range shown after the drag: %q", chips)
			}
			b.screenshot(fmt.Sprintf("demo-report-%d.png", width))
			if errs := b.pageErrors(); len(errs) > 0 {
				t.Fatalf("the page logged errors: %v", errs)
			}
		})
	}
}
