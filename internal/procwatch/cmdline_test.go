package procwatch

import (
	"errors"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestCmdlineReader: the command line as Facts.CommandLine joins it, cut
// at the bytes asked for, with nothing allocated once the buffer is
// there; a process that is gone is procfs.ErrGone.
func TestCmdlineReader(t *testing.T) {
	tg := testutil.Start(t, "/bin/sleep", "1000.125", "1")
	f, err := Read(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var r CmdlineReader
	for _, tc := range []struct {
		n    int
		want string
	}{
		{4096, f.CommandLine()},
		{len("/bin/sleep 1000.125 1") + 1, "/bin/sleep 1000.125 1"}, // its NUL dropped
		{len("/bin/sleep 10"), "/bin/sleep 10"},
		{1, "/"},
	} {
		got, err := r.Read(tg.Pid, tc.n)
		if err != nil || string(got) != tc.want {
			t.Errorf("Read(%d bytes) = %q, %v; want %q", tc.n, got, err, tc.want)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = r.Read(tg.Pid, 4096) }); allocs != 0 {
		t.Errorf("%v allocations a read, want none", allocs)
	}
	// A kernel thread's command line is empty.
	if got, err := r.Read(2, 4096); err != nil || len(got) != 0 {
		t.Errorf("kthreadd's command line %q, %v; want empty", got, err)
	}
	_ = tg.Cmd.Process.Kill()
	<-tg.Done()
	_, err = r.Read(tg.Pid, 4096)
	if !errors.Is(err, procfs.ErrGone) || !strings.Contains(err.Error(), procfs.PidPath(tg.Pid, "cmdline")) {
		t.Errorf("Read of a reaped process: %v, want procfs.ErrGone naming its file", err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = r.Read(tg.Pid, 4096) }); allocs != 0 {
		t.Errorf("%v allocations a read of a process gone, want none", allocs)
	}
}
