package perms

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPerfEventExplains(t *testing.T) {
	none := func(int) bool { return false }
	perfmon := func(c int) bool { return c == CapPerfmon }
	tests := []struct {
		name     string
		kernel   bool
		caps     func(int) bool
		paranoid int
		want     []string
	}{
		{"kernel frames", true, none, 2, []string{"perf_event_paranoid <= 1 (it is 2)", "CAP_PERFMON", "sysctl kernel.perf_event_paranoid=1", "setcap"}},
		{"user only", false, none, 3, []string{"perf_event_paranoid <= 2 (it is 3)", "--no-kernel"}},
		{"privileged", true, perfmon, 2, []string{"seccomp"}},
	}
	for _, tt := range tests {
		err := perfEventError("perf_event_open on pid 7", unix.EACCES, tt.kernel, tt.caps, tt.paranoid, true)
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("%s: %T is not *Error", tt.name, err)
		}
		if !errors.Is(err, unix.EACCES) {
			t.Errorf("%s: errno lost", tt.name)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tt.name, err, w)
			}
		}
	}
	if err := PerfEvent("x", unix.ENOENT, true); errors.As(err, new(*Error)) {
		t.Error("ENOENT became a permission error")
	}
}

func TestPtraceExplains(t *testing.T) {
	err := ptraceError("ptrace attach to 7", unix.EPERM, false, 1, true)
	for _, w := range []string{"CAP_SYS_PTRACE", "ptrace_scope is 1", "--no-ptrace"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	err = ptraceError("ptrace attach to 7", unix.EPERM, false, 0, false)
	if !strings.Contains(err.Error(), "another user") {
		t.Errorf("%q does not say the target belongs to another user", err)
	}
}

func TestProcAccessExplains(t *testing.T) {
	err := ProcAccess("read maps of pid 7", unix.EACCES)
	if !strings.Contains(err.Error(), "CAP_SYS_PTRACE") || strings.Contains(err.Error(), "--no-ptrace") {
		t.Errorf("%q: want CAP_SYS_PTRACE and no --no-ptrace (nothing is stopped)", err)
	}
}

func TestCapName(t *testing.T) {
	for c, want := range map[int]string{
		CapNetRaw: "CAP_NET_RAW", CapSysPtrace: "CAP_SYS_PTRACE", CapSysAdmin: "CAP_SYS_ADMIN",
		CapSyslog: "CAP_SYSLOG", CapPerfmon: "CAP_PERFMON", 40: "CAP_CHECKPOINT_RESTORE", 63: "capability 63", -1: "capability -1",
	} {
		if got := CapName(c); got != want {
			t.Errorf("CapName(%d) = %q, want %q", c, got, want)
		}
	}
}
