package perms

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// TestExplain: what each refusal says is missing and how to get it,
// for the process that meets it — a user is told the setcap, the sysctl
// and root; root, or a process holding the capability, never "run as
// root" but why holding it was not enough, or that its container dropped
// the capability.
func TestExplain(t *testing.T) {
	all := procfs.CapSet(1<<41 - 1)
	user := Self{Bnd: all, HostUserNS: true}
	root := Self{Root: true, Eff: all, Bnd: all, HostUserNS: true}
	rootless := Self{Root: true, Eff: all, Bnd: all}
	confined := Self{Root: true, Eff: all, Bnd: all, HostUserNS: true, Confined: "docker-default"}
	dropped := Self{Root: true, Eff: all &^ (1 << CapPerfmon) &^ (1 << CapSysAdmin), Bnd: all &^ (1 << CapPerfmon) &^ (1 << CapSysAdmin), HostUserNS: true}
	oldKernel := Self{Eff: 1 << CapSysAdmin, Bnd: all, HostUserNS: true}
	tests := []struct {
		name        string
		op          Op
		s           Self
		v           Setting
		want, avoid []string
	}{
		{"kernel frames, paranoid 2", SampleKernel, user, Setting{2, true},
			[]string{"CAP_PERFMON, or kernel.perf_event_paranoid <= 1 (it is 2)", "`sudo setcap cap_perfmon+ep $(command -v stallwatch)`", "`sudo sysctl kernel.perf_event_paranoid=1`", "run as root", "run with --no-kernel"}, nil},
		{"user frames, paranoid 3", Sample, user, Setting{3, true},
			[]string{"kernel.perf_event_paranoid <= 2 (it is 3)", "sysctl kernel.perf_event_paranoid=2"}, []string{"--no-kernel"}},
		{"paranoid unreadable", Sample, user, Setting{},
			[]string{"is perf_event enabled in this kernel?"}, []string{"sysctl"}},
		{"root refused: a policy", Sample, root, Setting{2, true},
			[]string{"stallwatch runs as root", "holds CAP_PERFMON", "a security policy stallwatch cannot see"}, []string{"run as root", "setcap", "sysctl"}},
		{"root in a rootless container", SampleOffCPU, rootless, Setting{2, true},
			[]string{"in a user namespace of its own", "run with --no-offcpu"}, []string{"run as root", "setcap", "cannot see"}},
		{"root under a security module", StopThreads, confined, Setting{1, true},
			[]string{"confined by a security module (label docker-default)"}, []string{"run as root", "setcap"}},
		{"root whose container dropped the capability", Sample, dropped, Setting{2, true},
			[]string{"CAP_PERFMON (stallwatch runs as root without it: its container or unit dropped it)", "docker run --cap-add PERFMON", "AmbientCapabilities=CAP_PERFMON"}, []string{"run as root", "setcap", "sysctl"}},
		{"CAP_SYS_ADMIN samples on a kernel before CAP_PERFMON", Sample, oldKernel, Setting{2, true},
			[]string{"a permission CAP_PERFMON does not give"}, []string{"setcap", "run as root"}},
		{"kernel names, kptr_restrict 1", KernelNames, user, Setting{1, true},
			[]string{"CAP_SYSLOG (kernel.kptr_restrict is 1)", "setcap cap_syslog+ep"}, nil},
		{"kernel names, kptr_restrict 2", KernelNames, user, Setting{2, true},
			[]string{"hides them from everyone", "`sudo sysctl kernel.kptr_restrict=0`"}, nil},
		{"root's kernel names, kptr_restrict 2", KernelNames, root, Setting{2, true},
			[]string{"hides them from everyone", "`sudo sysctl kernel.kptr_restrict=1`"}, []string{"run as root", "policy", "setcap"}},
		{"ptrace, Yama 1", StopThreads, user, Setting{1, true},
			[]string{"CAP_SYS_PTRACE (Yama kernel.yama.ptrace_scope is 1)", "`sudo sysctl kernel.yama.ptrace_scope=0`", "run with --no-ptrace"}, nil},
		{"ptrace, Yama 3", StopThreads, user, Setting{3, true},
			[]string{"ptrace_scope is 3", "run with --no-ptrace"}, []string{"sysctl"}},
		{"a JVM's user, as a user", ActAsUser, user, Setting{},
			[]string{"CAP_SETUID", "`sudo setcap cap_setuid+ep $(command -v stallwatch)`", "run as root"}, nil},
		{"a JVM's group, as root without CAP_SETGID", ActAsGroup, Self{Root: true, Eff: all &^ (1 << CapSetgid), Bnd: all &^ (1 << CapSetgid), HostUserNS: true}, Setting{},
			[]string{"CAP_SETGID (stallwatch runs as root without it", "docker run --cap-add SETGID"}, []string{"run as root", "setcap"}},
		{"a packet socket", PacketSocket, user, Setting{},
			[]string{"CAP_NET_RAW", "setcap cap_net_raw+ep"}, []string{"--no-"}},
	}
	for _, tc := range tests {
		n := Of(tc.op)
		msg := n.Missing(tc.s, tc.v) + " | " + strings.Join(n.Fixes(tc.s, tc.v), ", or ")
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", tc.name, msg, w)
			}
		}
		for _, a := range tc.avoid {
			if strings.Contains(msg, a) {
				t.Errorf("%s: %q says %q", tc.name, msg, a)
			}
		}
	}
}

// TestExplainErrors: the errors keep the errno, refuse to explain what is
// not a permission, and say of another user's process what --no-ptrace
// does and does not mend.
func TestExplainErrors(t *testing.T) {
	err := PerfEvent("perf_event_open on pid 7", unix.EACCES, true)
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(err, unix.EACCES) {
		t.Errorf("%v: not a *Error keeping EACCES", err)
	}
	if err := PerfEvent("x", unix.ENOENT, true); errors.As(err, new(*Error)) {
		t.Error("ENOENT became a permission error")
	}
	if os.Geteuid() != 0 {
		if err := Ptrace("ptrace attach to 7", unix.EPERM, false); !strings.Contains(err.Error(), "another user") || !strings.Contains(err.Error(), "--no-ptrace") {
			t.Errorf("%q does not say the target is another user's, or --no-ptrace", err)
		}
	}
	if err := ProcAccess("read the memory map", unix.EACCES); strings.Contains(err.Error(), "--no-ptrace") {
		t.Errorf("%q: --no-ptrace does not help a read of /proc", err)
	}
	if os.Geteuid() == 0 {
		for _, err := range []error{PerfEvent("x", unix.EACCES, true), Ptrace("x", unix.EPERM, false), ProcAccess("x", unix.EACCES), Explain(KernelStacks, "x", unix.EACCES)} {
			if strings.Contains(err.Error(), "as root") && !strings.Contains(err.Error(), "runs as root") {
				t.Errorf("as root: %q", err)
			}
		}
	}
}

// TestSelf: the facts of this process, as the kernel gives them.
func TestSelf(t *testing.T) {
	s := ReadSelf()
	if s.Root != (os.Geteuid() == 0) {
		t.Errorf("Root %v as uid %d", s.Root, os.Geteuid())
	}
	if s.Root && !s.Has(CapSysAdmin) && s.HostUserNS {
		t.Logf("root without CAP_SYS_ADMIN: a container that dropped it")
	}
	for m, want := range map[string]bool{"         0          0 4294967295\n": true, "0 100000 65536\n": false, "": false} {
		if got := hostUIDMap(m); got != want {
			t.Errorf("hostUIDMap(%q) = %v", m, got)
		}
	}
	for label, want := range map[string]string{"unconfined\n": "", "kernel\x00": "", "docker-default (enforce)\n": "docker-default",
		"system_u:system_r:container_t:s0:c1,c2": "system_u:system_r:container_t:s0:c1,c2", "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023": ""} {
		if got := confinement(label); got != want {
			t.Errorf("confinement(%q) = %q, want %q", label, got, want)
		}
	}
}

// TestSetcap: one order, each capability once, whatever was asked
// (the README's line, SetcapAll, is checked against the README by
// cmd/stallwatch's TestREADMESetcap).
func TestSetcap(t *testing.T) {
	if got := Setcap("x", []int{CapSyslog, CapPerfmon, CapSyslog}); got != "sudo setcap cap_perfmon,cap_syslog+ep x" {
		t.Errorf("Setcap = %q", got)
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
