package report

import (
	"testing"

	"github.com/stallwatch/stallwatch/model"
)

// FixtureCapture is the fixture of the package's own tests, for the
// end-to-end tests of package report_test.
func FixtureCapture(t *testing.T) *Capture { return fixtureCapture(t) }

// BenchCapture is the 100,000-sample capture of the package's
// benchmarks, for the page load benchmark of package report_test.
func BenchCapture(b *testing.B) *Capture { return benchCapture(b) }

// FixtureCaptureCut is the fixture with 200 more on-CPU samples during
// the stall of a thread whose stacks were cut short (spin's callers
// unknown: "[truncated: no unwind info in libfoo.so]").
func FixtureCaptureCut(t *testing.T) *Capture {
	cut := &model.Location{Kind: model.KindUnknown, Lines: []model.Line{{Function: "[truncated: no unwind info in libfoo.so]", SystemName: "[truncated: no unwind info in libfoo.so]"}}}
	s := fixtureSamples()
	for range 200 {
		s = append(s, model.Sample{Stack: []*model.Location{aSpin, cut}, TID: 19, ThreadName: "unwound", Phase: model.PhaseDuring, Count: 1})
	}
	p, err := BuildProfile(s, fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	return analyzed(&Capture{Info: fixtureInfo(), Profile: p, Threads: fixtureSnapshot()})
}
