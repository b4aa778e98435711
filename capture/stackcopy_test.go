package capture

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// startDeepPython runs CPython 3.12 under -X perf with work.py 30 calls
// deep: every Python call is a run of the interpreter's C frames through a
// trampoline, ~20 KiB of stack a sample (BenchmarkStackCopySize: 0.5%
// whole at 16 KiB, 100% at 32 KiB).
func startDeepPython(t *testing.T) *testutil.Target {
	py := testutil.RequireTool(t, python312)
	cmd := exec.Command(py, "-X", "perf", testutil.Testdata(t, "python", "work.py"), "30")
	cmd.Dir = t.TempDir()
	tg := testutil.StartCmd(t, cmd)
	t.Cleanup(func() { _ = os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)) })
	tg.WaitLine(t, "ready", 30*time.Second)
	return tg
}

// wholeAfter counts the on-CPU samples of p that end after the first
// skip of the recording, and those of them whose stack reaches the
// thread's first function.
func wholeAfter(p *profile.Profile, skip time.Duration) (whole, total int) {
	var first int64
	for _, s := range p.Sample {
		if ns := s.NumLabel[model.LabelEndTime]; len(ns) > 0 && (first == 0 || ns[0] < first) {
			first = ns[0]
		}
	}
	for _, s := range p.Sample {
		if len(s.Label[model.LabelOffCPU]) > 0 {
			continue
		}
		if ns := s.NumLabel[model.LabelEndTime]; len(ns) == 0 || ns[0] < first+skip.Nanoseconds() {
			continue
		}
		stacks, _ := ourStacks(&profile.Profile{Sample: []*profile.Sample{s}})
		if len(stacks) == 0 {
			continue
		}
		total++
		if isComplete(stacks[0]) {
			whole++
		}
	}
	return whole, total
}

// TestStackCopyGrows: a thread whose stacks are deeper than the 16 KiB
// copy samples start with (CPython 3.12 -X perf, 30 calls deep) has its
// copies grown at the defaults, and its stacks are whole from then on;
// capture.json says which thread grew and to what. With --stack-copy
// 16KiB given (a fixed size) the same stacks stay cut: the copies' growth,
// not the target, makes them whole.
func TestStackCopyGrows(t *testing.T) {
	testutil.RequirePerf(t)
	for _, tc := range []struct {
		name  string
		copy  int
		grows bool
	}{
		{"auto", 0, true},
		{"fixed 16KiB", DefaultStackCopy, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := startDeepPython(t)
			_, p, info, _ := recordCPU(t, tg.Pid, 2*time.Second, func(c *Config) {
				c.NoOffCPU, c.Unwind, c.NativeOnly, c.StackCopy = true, UnwindCFI, true, tc.copy
			})
			// The first moments' samples came with the copy the thread
			// started with; they are judged by the note below.
			whole, total := wholeAfter(p, 500*time.Millisecond)
			if total < 200 {
				t.Fatalf("%d on-CPU samples after the first 0.5 s: too few to judge", total)
			}
			share := float64(whole) / float64(total)
			notes := strings.Join(info.Notes, "\n")
			t.Logf("%d of %d stacks whole (%.1f%%); settings %+v; grown %+v; notes:\n%s", whole, total, 100*share, info.Settings, info.StackCopyGrown, notes)
			if !tc.grows {
				if len(info.StackCopyGrown) > 0 || info.Settings.StackCopyMax != 0 {
					t.Errorf("a fixed --stack-copy grew: %+v, max %d", info.StackCopyGrown, info.Settings.StackCopyMax)
				}
				if share > 0.5 {
					t.Errorf("%.1f%% of the stacks are whole with a fixed 16 KiB copy: the target is not deeper than it, and proves nothing", 100*share)
				}
				return
			}
			if share < 0.99 {
				t.Errorf("%d of %d stacks whole after the first 0.5 s (%.1f%%), want >= 99%%", whole, total, 100*share)
			}
			if info.Settings.StackCopy != DefaultStackCopy || info.Settings.StackCopyMax != MaxStackCopy {
				t.Errorf("settings say copies of %d bytes up to %d, want %d up to %d", info.Settings.StackCopy, info.Settings.StackCopyMax, DefaultStackCopy, MaxStackCopy)
			}
			i := slices.IndexFunc(info.StackCopyGrown, func(g model.ThreadStackCopy) bool { return g.TID == tg.Pid })
			if i < 0 || info.StackCopyGrown[i].Bytes < 32<<10 || info.StackCopyGrown[i].Bytes > MaxStackCopy {
				t.Errorf("capture.json's stack_copy_grown %+v: want the main thread %d at 32 KiB or more, at most %d", info.StackCopyGrown, tg.Pid, MaxStackCopy)
			}
			if !strings.Contains(notes, "the stack copies of 1 thread grew from 16 KiB") ||
				!strings.Contains(notes, fmt.Sprintf("%d (", tg.Pid)) {
				t.Errorf("the notes do not say which thread's copies grew:\n%s", notes)
			}
			if strings.Contains(notes, "--stack-copy") {
				t.Errorf("the notes advise a --stack-copy where the copies grow by themselves:\n%s", notes)
			}
		})
	}
}
