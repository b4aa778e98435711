package report

import "testing"

// FixtureCapture is the fixture of the package's own tests, for the
// end-to-end tests of package report_test.
func FixtureCapture(t *testing.T) *Capture { return fixtureCapture(t) }
