// Package perms explains permission failures: which kernel knob or
// capability is missing for an operation, and the command that grants it.
// Commands turn an *Error into exit code 3.
package perms

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Error is a permission failure a user can fix.
type Error struct {
	Op      string // what we tried: "perf_event_open on pid 123"
	Missing string // "CAP_PERFMON (or perf_event_paranoid <= 1)"
	Fix     string // a command that grants it
	Err     error  // the errno
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v: not permitted", e.Op, e.Err)
	if e.Missing != "" {
		fmt.Fprintf(&b, "; missing %s", e.Missing)
	}
	if e.Fix != "" {
		fmt.Fprintf(&b, "; fix: %s", e.Fix)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// IsPermission reports whether err is EPERM or EACCES.
func IsPermission(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// Paranoid returns kernel.perf_event_paranoid, or ok=false when unreadable.
func Paranoid() (int, bool) {
	n, err := procfs.Sysctl("kernel.perf_event_paranoid")
	return n, err == nil
}

// PtraceScope returns Yama's kernel.yama.ptrace_scope, or ok=false when
// Yama is not in the kernel.
func PtraceScope() (int, bool) {
	n, err := procfs.Sysctl("kernel.yama.ptrace_scope")
	return n, err == nil
}

// Capability numbers from linux/capability.h.
const (
	CapNetRaw    = 13
	CapSysPtrace = 19
	CapSysAdmin  = 21
	CapSyslog    = 34
	CapPerfmon   = 38
)

// capNames are the capabilities of linux/capability.h, by number.
var capNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
	"SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE",
	"AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
	"BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"}

// CapName names capability number c as the kernel's headers do
// ("CAP_SYS_PTRACE").
func CapName(c int) string {
	if c >= 0 && c < len(capNames) {
		return "CAP_" + capNames[c]
	}
	return fmt.Sprintf("capability %d", c)
}

// HasCap reports whether this process has capability c in its effective set.
func HasCap(c int) bool {
	pid := os.Getpid()
	st, err := procfs.ReadStatus(pid, pid)
	return err == nil && st.CapEff.Has(c)
}

// PerfEvent explains a failed perf_event_open. kernel says whether kernel
// callchains or kernel samples were asked for (they need paranoid <= 1).
func PerfEvent(op string, err error, kernel bool) error {
	if !IsPermission(err) {
		return err
	}
	p, ok := Paranoid()
	return perfEventError(op, err, kernel, HasCap, p, ok)
}

func perfEventError(op string, err error, kernel bool, hasCap func(int) bool, p int, ok bool) error {
	e := &Error{Op: op, Err: err}
	need := 2
	if kernel {
		need = 1
	}
	switch {
	case hasCap(CapPerfmon) || hasCap(CapSysAdmin):
		// Privileged but still refused: an LSM or seccomp said no.
		e.Missing = "permission from a security module or seccomp filter (CAP_PERFMON is present)"
		e.Fix = "check the container's seccomp profile and SELinux/AppArmor policy for perf_event_open"
	case ok:
		e.Missing = fmt.Sprintf("CAP_PERFMON (or CAP_SYS_ADMIN), or kernel.perf_event_paranoid <= %d (it is %d)", need, p)
		e.Fix = fmt.Sprintf("run as root, or `sudo setcap cap_perfmon,cap_sys_ptrace,cap_syslog+ep $(command -v stallwatch)`, or `sudo sysctl kernel.perf_event_paranoid=%d`", need)
		if !kernel {
			e.Fix += " (or add --no-kernel)"
		}
	default:
		e.Missing = "CAP_PERFMON (perf_event_paranoid is unreadable: is perf_event enabled in this kernel?)"
		e.Fix = "run as root or `sudo setcap cap_perfmon,cap_sys_ptrace,cap_syslog+ep $(command -v stallwatch)`"
	}
	return e
}

// Ptrace explains a failed ptrace attach or a refused /proc read that
// needs ptrace access.
func Ptrace(op string, err error) error {
	if !IsPermission(err) {
		return err
	}
	scope, ok := PtraceScope()
	return ptraceError(op, err, HasCap(CapSysPtrace), scope, ok)
}

func ptraceError(op string, err error, hasPtrace bool, scope int, yama bool) error {
	e := &Error{Op: op, Err: err}
	if yama && scope > 0 && !hasPtrace {
		e.Missing = fmt.Sprintf("CAP_SYS_PTRACE (Yama kernel.yama.ptrace_scope is %d)", scope)
		e.Fix = "`sudo setcap cap_sys_ptrace+ep $(command -v stallwatch)`, or `sudo sysctl kernel.yama.ptrace_scope=0`, or run with --no-ptrace"
		if scope == 3 {
			e.Fix = "ptrace_scope 3 cannot be lowered until reboot; run with --no-ptrace"
		}
		return e
	}
	e.Missing = "CAP_SYS_PTRACE (the target belongs to another user)"
	e.Fix = "run as the target's user or root, or `sudo setcap cap_sys_ptrace+ep $(command -v stallwatch)`, or run with --no-ptrace"
	return e
}

// ProcAccess explains a refused read of another process's /proc files
// (maps, environ, mem): the kernel checks them like a ptrace attach, but
// nothing is stopped, so --no-ptrace does not help.
func ProcAccess(op string, err error) error {
	if !IsPermission(err) {
		return err
	}
	e := &Error{Op: op, Err: err}
	e.Missing = "CAP_SYS_PTRACE (the target belongs to another user, or Yama restricts access)"
	e.Fix = "run as the target's user or root, or `sudo setcap cap_perfmon,cap_sys_ptrace,cap_syslog+ep $(command -v stallwatch)`"
	return e
}
