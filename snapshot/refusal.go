package snapshot

import (
	"fmt"
	"os"
	"strings"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/model"
)

// processRefusal says why no thread of pid can be stopped, before any is
// tried: a kernel thread, or stallwatch's own process.
func processRefusal(pid int) error {
	if pid == os.Getpid() {
		return model.ErrOwnProcess
	}
	if st, err := procfs.ReadStat(pid, pid); err == nil && st.KernelThread() {
		return model.ErrKernelThread
	}
	return nil
}

// tracedError describes a thread held by another tracer.
func tracedError(tid, tracer int) *model.TracedError {
	e := &model.TracedError{TID: tid, Tracer: tracer}
	if name, err := procfs.Comm(tracer, tracer); err == nil {
		e.TracerName = name
	}
	return e
}

// explainRefusal says truly why the kernel refused to let stallwatch
// ptrace thread tid of pid: what a user can fix (a missing capability, a
// Yama setting) as a *perms.Error, what no flag changes as a
// *RefusedError naming the facts checked.
func explainRefusal(pid, tid int, errno error) error {
	if !perms.IsPermission(errno) {
		return fmt.Errorf("ptrace thread %d of pid %d: %w", tid, pid, errno)
	}
	if err := processRefusal(pid); err != nil {
		return err
	}
	op := fmt.Sprintf("ptrace pid %d", pid)
	if !perms.HasCap(perms.CapSysPtrace) {
		st, err := procfs.ReadStatus(pid, tid)
		if err != nil || !sameUser(st) {
			return perms.Ptrace(op, errno, false)
		}
		if scope, ok := perms.PtraceScope(); ok && scope > 0 {
			return perms.Ptrace(op, errno, true)
		}
		// Our own user's process, no Yama: the kernel refuses a process
		// that changed its credentials or said it is not dumpable.
		return perms.NotDumpable(op, errno)
	}
	return &model.RefusedError{PID: pid, TID: tid, Err: errno, Why: refusalFacts(pid)}
}

// sameUser reports whether every uid of the thread is ours.
func sameUser(st procfs.Status) bool {
	me := uint32(os.Geteuid())
	for _, u := range st.Uid[:3] {
		if u != me {
			return false
		}
	}
	return true
}

// refusalFacts lists what is known of a process the kernel protects from
// a tracer holding CAP_SYS_PTRACE: what is particular to the target,
// then why holding the capability was not enough (package perms).
func refusalFacts(pid int) string {
	var facts []string
	if pid == 1 {
		facts = append(facts, "it is pid 1, the init process of this machine or sandbox")
	} else if st, err := procfs.ReadStatus(pid, pid); err == nil && st.InnerPid() == 1 {
		facts = append(facts, "it is pid 1 of its own pid namespace (a container's init)")
	}
	if extra := capsBeyondOurs(pid); extra != "" {
		facts = append(facts, "it holds capabilities stallwatch lacks ("+extra+")")
	}
	facts = append(facts, perms.ReadSelf().WhyRefused(perms.CapSysPtrace))
	return strings.Join(facts, "; ")
}

// capsBeyondOurs names the permitted capabilities of pid that this
// process does not have in its own permitted set.
func capsBeyondOurs(pid int) string {
	theirs, err1 := procfs.ReadStatus(pid, pid)
	self := os.Getpid()
	ours, err2 := procfs.ReadStatus(self, self)
	if err1 != nil || err2 != nil {
		return ""
	}
	var names []string
	for c := range 64 {
		if theirs.CapPrm.Has(c) && !ours.CapPrm.Has(c) {
			names = append(names, perms.CapName(c))
		}
	}
	return strings.Join(names, ", ")
}
