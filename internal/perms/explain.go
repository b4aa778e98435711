package perms

import (
	"fmt"
	"strings"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Setting is a kernel setting's value as read now; Known is false when
// this kernel has no such setting or it cannot be read.
type Setting struct {
	V     int
	Known bool
}

// ReadSetting reads the kernel setting name.
func ReadSetting(name string) Setting {
	if name == "" {
		return Setting{}
	}
	v, err := procfs.Sysctl(name)
	return Setting{v, err == nil}
}

// Missing says what grants n, for the process s: the capability, the
// setting that allows it instead with its value now (v), and, for a
// process that holds the capability, why that was not enough.
func (n Need) Missing(s Self, v Setting) string {
	c := CapName(n.Cap)
	switch {
	case n.hidesFromAll(v):
		return kptrMissing(c, v)
	case n.heldBy(s):
		return "a permission " + c + " does not give: " + s.WhyRefused(n.Cap)
	case s.Root:
		return c + " (stallwatch runs as root without it: its container or unit dropped it)"
	}
	switch n.Sysctl {
	case "kernel.perf_event_paranoid":
		if !v.Known {
			return c + " (kernel.perf_event_paranoid is unreadable: is perf_event enabled in this kernel?)"
		}
		return fmt.Sprintf("%s, or kernel.perf_event_paranoid <= %d (it is %d)", c, n.AtMost, v.V)
	case "kernel.yama.ptrace_scope":
		if v.Known && v.V > 0 {
			return fmt.Sprintf("%s (Yama kernel.yama.ptrace_scope is %d)", c, v.V)
		}
	case "kernel.kptr_restrict":
		return kptrMissing(c, v)
	}
	return c
}

// hidesFromAll reports whether the setting v refuses n to every
// process, whatever it holds: kernel.kptr_restrict 2.
func (n Need) hidesFromAll(v Setting) bool {
	return n.Sysctl == "kernel.kptr_restrict" && v.Known && v.V >= 2
}

// kptrMissing: with kptr_restrict 0 the kernel shows the addresses to
// whoever may profile the kernel (perf_event_paranoid <= 1); at 1, to
// CAP_SYSLOG only; at 2, to nobody.
func kptrMissing(c string, v Setting) string {
	switch {
	case !v.Known:
		return c
	case v.V == 0:
		return c + ", or kernel.perf_event_paranoid <= 1 (kernel.kptr_restrict is 0)"
	case v.V == 1:
		return c + " (kernel.kptr_restrict is 1)"
	}
	return fmt.Sprintf("kernel.kptr_restrict <= 1 and %s (kernel.kptr_restrict is %d hides them from everyone)", c, v.V)
}

// Fixes are the ways to get n, for the process s, with the setting's
// value now (v): a setcap and root for a user who may be granted the
// capability; the container or unit for one whose bounding set lacks
// it; the policy for one that holds it. The flag that does without it
// comes last.
func (n Need) Fixes(s Self, v Setting) []string {
	var out []string
	switch {
	case n.hidesFromAll(v) && n.heldBy(s):
		out = append(out, "`sudo sysctl kernel.kptr_restrict=1`")
	case n.heldBy(s):
		out = append(out, "have the policy above allow it")
	case s.Root || !s.CanGrant(n.Cap):
		name := strings.TrimPrefix(CapName(n.Cap), "CAP_")
		out = append(out, fmt.Sprintf("give stallwatch %s where it runs (docker run --cap-add %s, a pod's securityContext.capabilities.add, systemd AmbientCapabilities=%s)",
			CapName(n.Cap), name, CapName(n.Cap)))
	default:
		out = append(out, "`"+Setcap(ownExe, []int{n.Cap})+"`")
		if sc := n.sysctlFix(v); sc != "" {
			out = append(out, sc)
		}
		out = append(out, "run as root")
	}
	if n.Without != "" {
		out = append(out, "run with "+n.Without)
	}
	return out
}

// sysctlFix is the setting that allows n without its capability, when
// one does and it is not already so.
func (n Need) sysctlFix(v Setting) string {
	switch n.Sysctl {
	case "kernel.perf_event_paranoid":
		if v.Known && v.V > n.AtMost {
			return fmt.Sprintf("`sudo sysctl kernel.perf_event_paranoid=%d`", n.AtMost)
		}
	case "kernel.yama.ptrace_scope":
		if v.Known && v.V == 3 {
			return "" // cannot be lowered until reboot
		}
		if v.Known && v.V > 0 {
			return "`sudo sysctl kernel.yama.ptrace_scope=0`"
		}
	case "kernel.kptr_restrict":
		if v.Known && v.V > 0 {
			return "`sudo sysctl kernel.kptr_restrict=0` with kernel.perf_event_paranoid <= 1"
		}
	}
	return ""
}

// explain is the *Error of op refused for s.
func explain(op Op, what string, err error, s Self) *Error {
	n := Of(op)
	v := ReadSetting(n.Sysctl)
	return &Error{Op: what, Err: err, Missing: n.Missing(s, v), Fix: strings.Join(n.Fixes(s, v), ", or ")}
}

// PerfEvent explains a failed perf_event_open. kernel says whether kernel
// callchains or kernel samples were asked for (they need paranoid <= 1).
func PerfEvent(what string, err error, kernel bool) error {
	if !IsPermission(err) {
		return err
	}
	op := Sample
	if kernel {
		op = SampleKernel
	}
	return explain(op, what, err, ReadSelf())
}

// Ptrace explains a failed ptrace attach, for a target of stallwatch's
// own user (ours) or another's.
func Ptrace(what string, err error, ours bool) error {
	if !IsPermission(err) {
		return err
	}
	s := ReadSelf()
	if !ours && !s.Has(CapSysPtrace) {
		e := explain(ReadOthers, what, err, s)
		e.Missing = OtherUsers
		e.Fix = strings.Join(append(Of(ReadOthers).Fixes(s, Setting{}), "run as the target's user", "run with --no-ptrace"), ", or ")
		return e
	}
	return explain(StopThreads, what, err, s)
}

// OtherUsers is what a process that neither is root nor holds
// CAP_SYS_PTRACE misses to read or stop another user's process.
var OtherUsers = CapName(CapSysPtrace) + " (the target belongs to another user)"

// NotDumpable explains a ptrace attach refused to a process of
// stallwatch's own user, with no Yama restriction: the target changed its
// credentials or is not dumpable.
func NotDumpable(what string, err error) error {
	e := explain(StopThreads, what, err, ReadSelf())
	e.Missing = CapName(CapSysPtrace) + " (the target is your user's but not dumpable: it changed its credentials, as a setuid program does, or called prctl(PR_SET_DUMPABLE, 0))"
	return e
}

// ProcAccess explains a refused read of another process's /proc files
// (maps, environ, mem): the kernel checks them like a ptrace attach, but
// nothing is stopped, so --no-ptrace does not help.
func ProcAccess(what string, err error) error {
	if !IsPermission(err) {
		return err
	}
	s := ReadSelf()
	e := explain(ReadOthers, what, err, s)
	if !s.Has(CapSysPtrace) && !s.Root {
		e.Missing = CapName(CapSysPtrace) + " (the target belongs to another user, or Yama restricts access)"
		e.Fix += ", or run as the target's user"
	}
	return e
}

// Explain explains a refusal of op (what was tried: what) for this
// process.
func Explain(op Op, what string, err error) error {
	if !IsPermission(err) {
		return err
	}
	return explain(op, what, err, ReadSelf())
}

// Note says, for a capture's notes, what is lost without op and how to
// have it, for this process: "kernel frames show as [kernel]: kernel
// function names (/proc/kallsyms hides its addresses) needs CAP_SYSLOG
// (kernel.kptr_restrict is 1); `sudo setcap …`, or run as root".
func Note(op Op) string {
	n := Of(op)
	s := ReadSelf()
	v := ReadSetting(n.Sysctl)
	return fmt.Sprintf("%s: %s needs %s; %s", n.Lost, n.What, n.Missing(s, v), strings.Join(n.Fixes(s, v), ", or "))
}
