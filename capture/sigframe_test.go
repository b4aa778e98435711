package capture

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestSignalInterruptedFrame: the frame under a signal frame is where the
// signal interrupted the thread, the instruction to run next — not a
// return address. testdata/sigframe traps at the first instruction of
// trap_at_entry and spins in its handler: each sampled stack must name
// trap_at_entry under the signal frame, not before_trap, the function
// that ends where it begins (what naming the byte before the pc gives).
func TestSignalInterruptedFrame(t *testing.T) {
	testutil.EndToEnd(t)
	testutil.RequirePerf(t)
	gcc := testutil.RequireTool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "sigframe")
	if out, err := exec.Command(gcc, "-O2", "-g", "-o", bin, testutil.Testdata(t, "sigframe", "sigframe.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	tg := testutil.Start(t, bin)
	tg.WaitLine(t, "ready", 10*time.Second)
	_, p, _, _ := recordCPU(t, tg.Pid, 300*time.Millisecond, func(c *Config) { c.NoOffCPU = true })
	through, right := 0, 0
	for _, s := range p.Sample {
		frames := userFrames(s)
		for i, f := range frames {
			if !strings.Contains(f.name, "spin_in_handler") || i+2 >= len(frames) {
				continue
			}
			through++
			// spin_in_handler ← __restore_rt (the signal frame) ← the
			// interrupted function ← main
			if under := frames[i+2].name; under == "trap_at_entry" {
				right++
			} else if through-right <= 3 {
				t.Errorf("under the signal frame: %s, want trap_at_entry\n  %s", under, framesText(frames))
			}
			break
		}
	}
	if through < 10 {
		t.Fatalf("%d samples in the handler with frames under it", through)
	}
	t.Logf("%d of %d samples in the handler name trap_at_entry under the signal frame", right, through)
}
