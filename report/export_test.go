package report

import "testing"

// FixtureCapture is the fixture of the package's own tests, for the
// end-to-end tests of package report_test.
func FixtureCapture(t *testing.T) *Capture { return fixtureCapture(t) }

// BenchCapture is the 100,000-sample capture of the package's
// benchmarks, for the page load benchmark of package report_test.
func BenchCapture(b *testing.B) *Capture { return benchCapture(b) }
