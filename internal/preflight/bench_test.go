package preflight

import (
	"os"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkCheck is what the checks add to a command's start: every probe
// a watch with default settings makes on a process (perf events opened and
// closed, /proc files, the output directory tried).
func BenchmarkCheck(b *testing.B) {
	testutil.RequirePerf(b)
	out := b.TempDir()
	n := Needs{Verb: "watch", PID: os.Getpid(), Rates: []Rate{{"--freq", 997}, {"--baseline-freq", 49}},
		Sample: true, Kernel: true, OffCPU: true, Snapshot: true, Ptrace: true, Out: out, OutFlag: "--out"}
	for b.Loop() {
		if _, err := Check(n); err != nil {
			b.Fatal(err)
		}
	}
}
