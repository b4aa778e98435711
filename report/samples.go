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
// profiler's with neither keeps its stack, weighing nothing); samples
// keep the profile's order, locations the profile's sharing.
func Samples(p *profile.Profile) *model.Profile { return tableOf(p).model() }
