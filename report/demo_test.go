package report_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

func itoa(n int) string { return strconv.Itoa(n) }
func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// demoCapture runs testdata/demo (the bank service of `make demo`) under
// a capture session, waits for its heartbeat to stall as the watchdog
// would (1.5 s without a beat), and captures.
func demoCapture(t *testing.T) (*report.Capture, string, map[string]int) {
	t.Helper()
	bin := testutil.BuildGo(t, "demo")
	beat := filepath.Join(t.TempDir(), "demo.beat")
	tg := testutil.Start(t, bin, "--heartbeat", beat, "--every", "100ms", "--healthy-for", "1s")
	tg.WaitLine(t, "ready", 20*time.Second)
	s := session(t, tg.Pid, capture.Config{})
	tg.WaitLine(t, "deadlocking", 20*time.Second)
	tids := map[string]int{}
	for _, n := range []string{"transfer-c2s", "transfer-s2c", "heartbeat", "reconciler"} {
		tids[n] = tidOf(t, tg.Pid, n)
	}
	const stallAfter = 1500 * time.Millisecond
	if err := testutil.Eventually(30*time.Second, func() bool { return fileAge(beat) >= stallAfter }); err != nil {
		t.Fatalf("the demo's heartbeat did not stall: %v", err)
	}
	last := time.Now().Add(-fileAge(beat))
	c, dir := captureNow(t, s, model.Trigger{Kind: model.Stall, At: time.Now(), LastBeat: last, StallFor: time.Since(last),
		Source: "file " + beat, Reason: fmt.Sprintf("no heartbeat from file %s for %v", beat, stallAfter)})
	return c, dir, tids
}

// TestDemo captures the demo once and checks its findings and its page.
func TestDemo(t *testing.T) {
	c, dir, tids := demoCapture(t)
	t.Run("findings", func(t *testing.T) { testDemoFindings(t, c, tids) })
	t.Run("page", func(t *testing.T) { testDemoPage(t, dir, tids) })
}

// testDemoFindings: the demo's deadlock comes first, the reconciler that
// spins while the others wait is named for it, and it is not "starved"
// although it waited now and then for a CPU.
func testDemoFindings(t *testing.T, c *report.Capture, tids map[string]int) {
	if len(c.Info.Findings) == 0 || c.Info.Findings[0].Kind != model.FindingDeadlock {
		t.Fatalf("the first finding is not the deadlock:\n%s", findingsText(c))
	}
	for _, k := range []model.FindingKind{model.FindingStopped, model.FindingRuntimePause, model.FindingEventLoopBlocked,
		model.FindingGIL, model.FindingLockConvoy, model.FindingUninterruptible, model.FindingMissingJITSymbols} {
		mustNotFinding(t, c, k)
	}
	dl := c.Info.Findings[0]
	if !hasTID(dl, tids["transfer-c2s"]) || !hasTID(dl, tids["transfer-s2c"]) {
		t.Errorf("the deadlock names %v, want the transfer threads %d and %d", dl.TIDs, tids["transfer-c2s"], tids["transfer-s2c"])
	}
	// What the reconciler got depends on the host: on a quiet one it
	// spins nearly the whole window; on one loaded by other processes it
	// waits for a CPU. The findings must follow what it got.
	cpu, runq, window := threadShares(t, c, tids["reconciler"])
	t.Logf("reconciler: on a CPU %.0f%%, runnable but waiting %.0f%% of the %v window", 100*cpu, 100*runq, window)
	starved, isStarved := findingOf(c, model.FindingCPUStarvation)
	isStarved = isStarved && hasTID(starved, tids["reconciler"])
	switch {
	case cpu >= 0.8:
		spin := mustFinding(t, c, model.FindingSpinning)
		if len(spin.TIDs) == 0 || spin.TIDs[0] != tids["reconciler"] || !strings.Contains(strings.Join(spin.Functions, " "), "main.reconcile") {
			t.Errorf("the spinning finding names %v %v, want the reconciler %d in main.reconcile", spin.TIDs, spin.Functions, tids["reconciler"])
		}
		mustNotFinding(t, c, model.FindingHotThread)
		if isStarved {
			t.Errorf("the reconciler, on a CPU %.0f%% of the window, is called starved: %s", 100*cpu, starved.Summary)
		}
	case runq >= 0.2 && runq >= cpu:
		if !isStarved {
			t.Errorf("the reconciler waited %.0f%% of the window for a CPU and ran %.0f%%: it is starved, and no finding says so", 100*runq, 100*cpu)
		}
	default:
		if isStarved {
			t.Errorf("the reconciler waited only %.0f%% of the window for a CPU (ran %.0f%%), yet: %s", 100*runq, 100*cpu, starved.Summary)
		}
	}
	t.Logf("findings:\n%s", findingsText(c))
}

// testDemoPage: the demo's report in a real browser shows the deadlocked
// threads blocked from before the trigger in the timeline, a time range
// selected there narrows the flame graph, and the page works at a laptop's
// half-width window too. Screenshots are kept as artifacts.
func testDemoPage(t *testing.T, dir string, tids map[string]int) {
	page := filepath.Join(dir, capdir.FileHTML)
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

// threadShares is a thread's on-CPU and runnable-waiting time during the
// stall, as shares of the capture's window after the trigger.
func threadShares(t *testing.T, c *report.Capture, tid int) (cpu, runq float64, window time.Duration) {
	t.Helper()
	window = c.Info.End.Sub(c.Info.TriggerAt)
	p := c.Profile
	ci, oi := -1, -1
	for i, st := range p.SampleType {
		switch st.Type {
		case model.TypeCPUTime:
			ci = i
		case model.TypeOffCPUTime:
			oi = i
		}
	}
	var on, wait int64
	for _, s := range p.Sample {
		if s.Label[model.LabelThreadID][0] != itoa(tid) || s.Label[model.LabelPhase][0] != model.PhaseDuring {
			continue
		}
		on += s.Value[ci]
		if v := s.Label[model.LabelOffCPU]; len(v) > 0 && v[0] == "preempted" {
			wait += s.Value[oi]
		}
	}
	return float64(on) / float64(window), float64(wait) / float64(window), window
}
