package report_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// browser is a real headless Chromium (Debian's, installed by .ci/deps),
// driven over the DevTools protocol: pages load as a user's would, from a
// file:// URL, and what the page logs as an error is collected.
type browser struct {
	t      testing.TB
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// newBrowser starts Chromium with an empty profile and temporary directory
// of the test's, the given window size, and nothing that reaches the
// network on its own.
func newBrowser(t testing.TB, width, height int) *browser {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: end to end, skipped by -short")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		testutil.Skip(t, "no chromium (Debian's package chromium; .ci/deps installs it): %v", err)
	}
	// Chromium's temporary files (org.chromium.Chromium.*: its singleton
	// socket, and its shared memory, which disable-dev-shm-usage puts in
	// $TMPDIR instead of /dev/shm), removed once the cleanup below has
	// ended it; a directory of its own, not t.TempDir, whose path is too
	// long for the socket's (108 bytes).
	tmp, err := os.MkdirTemp("", "chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("TMPDIR=" + tmp),
		chromedp.WindowSize(width, height),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelC(); cancelA() })
	// The first call starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	b := &browser{t: t, ctx: ctx}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s: %s", m.Type, m.String()))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// open loads a file and waits until the viewer has drawn; it returns how
// long that took, from navigation to the viewer's ready mark.
func (b *browser) open(file string) time.Duration {
	b.t.Helper()
	abs, err := filepath.Abs(file)
	if err != nil {
		b.t.Fatal(err)
	}
	start := time.Now()
	b.do("loading "+file, chromedp.Navigate("file://"+abs), chromedp.WaitReady(chromedp.CSS(`html[data-ready="1"]`)))
	return time.Since(start)
}

func (b *browser) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// do runs actions within a minute, failing the test on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v (page errors: %v)", what, err, b.pageErrors())
	}
}

// eval evaluates a JavaScript expression into out.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v (page errors: %v)", js, err, b.pageErrors())
	}
	return v
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, `(document.querySelector(`+jsString(sel)+`)||{}).textContent||""`)
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// click clicks with the mouse at viewport coordinates, as a user does.
func (b *browser) click(x, y float64) {
	b.t.Helper()
	b.do("clicking", chromedp.MouseClickXY(x, y))
}

// hover moves the mouse to viewport coordinates.
func (b *browser) hover(x, y float64) {
	b.t.Helper()
	b.do("moving the mouse", chromedp.MouseEvent(chromedp.MouseMoved, x, y))
}

// drag presses the mouse at one point and releases it at another.
func (b *browser) drag(x0, y, x1 float64) {
	b.t.Helper()
	steps := []chromedp.Action[chromedp.Void]{
		chromedp.MouseEvent(chromedp.MouseMoved, x0, y),
		chromedp.MouseEvent(chromedp.MousePressed, x0, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	}
	for i := 1; i <= 5; i++ {
		steps = append(steps, chromedp.MouseEvent(chromedp.MouseMoved, x0+(x1-x0)*float64(i)/5, y, chromedp.ButtonLeft))
	}
	steps = append(steps, chromedp.MouseEvent(chromedp.MouseReleased, x1, y, chromedp.ButtonLeft, chromedp.ClickCount(1)))
	b.do("dragging", steps...)
}

// screenshot saves the whole page as a PNG under the test's artifact
// directory (kept with go test -artifacts) and logs where.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := b.t.TempDir()
	if a, ok := b.t.(interface{ ArtifactDir() string }); ok {
		dir = a.ArtifactDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// box is an element's rectangle in viewport coordinates.
type box struct{ X, Y, W, H float64 }

// box finds an element with a JavaScript expression, scrolls it into view
// and returns its rectangle.
func (b *browser) box(js string) box {
	b.t.Helper()
	return eval[box](b, `(function(){var e=`+js+`; if(!e) return {X:-1,Y:-1,W:0,H:0}; e.scrollIntoView({block:'center'}); var r=e.getBoundingClientRect(); return {X:r.left,Y:r.top,W:r.width,H:r.height};})()`)
}

// waitAttr waits until the element's attribute passes ok (events such as
// mouse moves reach the page with its next frame).
func (b *browser) waitAttr(sel, attr string, ok func(string) bool) {
	b.t.Helper()
	var v string
	js := `(function(){var e=document.querySelector(` + jsString(sel) + `); return (e&&e.getAttribute(` + jsString(attr) + `))||"";})()`
	err := testutil.Eventually(20*time.Second, func() bool {
		v = eval[string](b, js)
		return ok(v)
	})
	if err != nil {
		b.t.Fatalf("%s's %s is %q", sel, attr, v)
	}
}

// rect is an element's rectangle in viewport coordinates, without
// scrolling.
func (b *browser) rect(js string) box {
	b.t.Helper()
	return eval[box](b, `(function(){var e=`+js+`; if(!e) return {X:-1,Y:-1,W:0,H:0}; var r=e.getBoundingClientRect(); return {X:r.left,Y:r.top,W:r.width,H:r.height};})()`)
}
