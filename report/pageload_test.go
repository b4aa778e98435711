package report_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/stallwatch/stallwatch/report"
)

// BenchmarkPageLoad opens the report.html of a 100,000-sample capture (10 s,
// 64 threads, 4,000 distinct stacks; BenchCapture) in headless Chromium, as
// a user opens the file, until its viewer has drawn the flame graph and
// the timeline. Goal (issue 13): under 2 s. It reports the page's size, the
// time from navigation to the viewer's ready mark as the page measures it
// (ready-ms), and the round trip seen from here (ns/op).
func BenchmarkPageLoad(b *testing.B) {
	c := report.BenchCapture(b)
	path := writeHTMLFileB(b, c)
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	br := newBrowser(b, 1400, 1000)
	br.open(path) // warm the browser's caches once, as a second look would
	var readyMS float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br.open(path)
		ms, _ := strconv.ParseFloat(eval[string](br, `document.documentElement.getAttribute('data-ready-ms')`), 64)
		readyMS += ms
	}
	b.StopTimer()
	if errs := br.pageErrors(); len(errs) > 0 {
		b.Fatalf("the page logged errors: %v", errs)
	}
	b.Logf("in the page (ms): %s", eval[string](br, `document.documentElement.getAttribute('data-timing')`))
	b.ReportMetric(float64(st.Size())/1e6, "MB")
	b.ReportMetric(readyMS/float64(b.N), "ready-ms")
}
