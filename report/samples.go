package report

import (
	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// Samples reads a profile's samples back into the capture model: what the
// findings are drawn from (package analysis), at capture time from the
// profile a capture writes and later from the one it wrote, so that both
// draw the same. A pprof sample with on-CPU time becomes an on-CPU
// sample, one with off-CPU time an off-CPU one (a sample of another
// profiler's with neither keeps its stack, weighing nothing). Samples of
// one stack, labels and kind add into one, in the order of the first of
// them, without an EndNanos: what the findings read are sums, and each
// phase's span of sample times is kept apart (model.Profile's Spans).
// Locations keep the profile's sharing.
func Samples(p *profile.Profile) *model.Profile { return tableOf(p).model() }
