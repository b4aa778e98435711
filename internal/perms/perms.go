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
	CapSetgid    = 6
	CapSetuid    = 7
	CapNetAdmin  = 12
	CapNetRaw    = 13
	CapIPCLock   = 14
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
