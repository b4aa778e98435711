package target

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestOpenExited: opening a target that exited fails with procfs.ErrGone
// and a message that names its pid once — each function names its own
// arguments, callers add only what they add (it read "pid N: pid N:
// process or thread has exited", and a capture's "symbol sources of pid
// N: …" named it a third time). The target is a zombie its parent (this
// test) has not reaped, then a pid gone.
func TestOpenExited(t *testing.T) {
	testutil.EndToEnd(t)
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	zombie := func() bool { st, err := procfs.ReadStat(pid, pid); return err == nil && st.State == 'Z' }
	if err := testutil.Eventually(10*time.Second, zombie); err != nil {
		cmd.Wait()
		t.Fatalf("pid %d never became a zombie", pid)
	}
	for _, what := range []string{"a zombie", "a pid gone"} {
		if what == "a pid gone" {
			cmd.Wait()
		}
		p, err := Open(pid, Options{JIT: true})
		if err == nil {
			p.Close()
			t.Fatalf("%s: Open succeeded", what)
		}
		if !errors.Is(err, procfs.ErrGone) {
			t.Errorf("%s: %v, want procfs.ErrGone", what, err)
		}
		if n := strings.Count(err.Error(), fmt.Sprintf("pid %d", pid)); n > 1 {
			t.Errorf("%s: %q names pid %d %d times", what, err, pid, n)
		}
	}
}
