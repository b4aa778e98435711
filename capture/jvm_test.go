package capture

import (
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// spinShare is the share of a profile's on-CPU samples whose stacks run
// through a frame named like name.
func spinShare(t *testing.T, p *profile.Profile, name string) (named, total int64) {
	t.Helper()
	ci := valueIndex(t, p, model.TypeCPUSamples)
	for _, s := range p.Sample {
		if threadName(s) != "spinner-1" {
			continue
		}
		total += s.Value[ci]
		for _, n := range funcs(s) {
			if strings.Contains(n, name) {
				named += s.Value[ci]
				break
			}
		}
	}
	return named, total
}

// TestRecordJVMPerfMap: a JVM started with no flag gets its compiled code
// named: the capture asks it for its perf map through its attach
// mechanism, and says so.
func TestRecordJVMPerfMap(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.StartJava(t, nil, "spin")
	_, p, info := record(t, tg.Pid, 2*time.Second, func(c *Config) { c.NoOffCPU = true })
	note := ""
	for _, n := range info.Notes {
		if strings.HasPrefix(n, "JIT names:") {
			note = n
		}
	}
	if !strings.Contains(note, "the JVM's perf map, written when asked through its attach mechanism") {
		t.Errorf("notes %q, want the JIT names' from the JVM's perf map", info.Notes)
	}
	if named, total := spinShare(t, p, "Spinner.spin"); total == 0 || float64(named) < 0.9*float64(total) {
		t.Errorf("Spinner.spin in %d of spinner-1's %d CPU samples", named, total)
	}
}

// TestRecordJVMAtSafepoint: a JVM held at a safepoint cannot answer; its
// compiled code is named from its code cache, read from its memory, and
// the capture says why.
func TestRecordJVMAtSafepoint(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.StartJava(t, []string{"-XX:-UseCountedLoopSafepoints"}, "safepoint")
	_, p, info := record(t, tg.Pid, 3*time.Second, func(c *Config) { c.NoOffCPU = true })
	note := ""
	for _, n := range info.Notes {
		if strings.HasPrefix(n, "JIT names:") {
			note = n
		}
	}
	if !strings.Contains(note, "code cache read from its memory") || !strings.Contains(note, "did not answer") {
		t.Errorf("notes %q, want the JIT names from the code cache because the JVM did not answer", info.Notes)
	}
	if named, total := spinShare(t, p, "Spinner.spin"); total == 0 || float64(named) < 0.9*float64(total) {
		t.Errorf("Spinner.spin in %d of spinner-1's %d CPU samples", named, total)
	}
}
