package capture

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/target"
)

// endToPprof is BenchmarkEndToPprof's recording: a spinning Go target,
// perf record -g at 10 kHz (frame pointers).
var endToPprof perfRecording

// BenchmarkEndToPprof measures what the user waits for when a recording
// ends: symbolizing 100,000 samples (kernel and user frames), building
// the pprof profile and writing the capture directory, beside `perf
// report --stdio` on the same samples (perf's recording of the target,
// which both read), cold and warm (see perfRecording).
//
//	go test -run '^$' -bench 'EndToPprof$' -count 5 ./capture
func BenchmarkEndToPprof(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequireTool(b, "perf")
	setupPerfRecording(b, &endToPprof, func(dir string) (*exec.Cmd, error) {
		bin := filepath.Join(dir, "spin")
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Dir = testutil.Testdata(b, "spin")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build spin: %v\n%s", err, out)
		}
		return exec.Command(bin, "-threads", "4", "-depth", "6"), nil
	}, wantSamples*110*time.Microsecond, true, "-g")
	benchEnd(b, &endToPprof, UnwindFP, func(*testing.B, *target.Process) ([]sampler.Sample, time.Duration) {
		return endToPprof.samples, 0
	})
}

// TestMain stops the benchmarks' targets.
func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveJavaClasses()
	endToPprof.close()
	endToPprofCopies.close()
	os.Exit(code)
}
