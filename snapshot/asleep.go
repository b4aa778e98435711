package snapshot

import (
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/unwind"
)

// A thread asleep in a system call is read without a stop. Its user
// registers were saved at its entry into the kernel, and
// /proc/<pid>/task/<tid>/syscall shows the system call, its arguments and
// the saved stack and instruction pointers (the kernel shows them only
// for a thread off the CPU, and says "running" otherwise); its user stack
// does not change while it sleeps, so the top of it is copied with
// process_vm_readv, as under a stop, and unwound from those two
// registers. What proves the copy is of the stack the registers describe
// is the kernel's accounting of the thread, read before the syscall line
// and again after the copy and the walk (readAsleep): a thread cannot run
// without being put on a CPU, which its schedstat counts (timeslices,
// counted as it arrives on one) — so the same schedstat after the walk
// means it was not put on a CPU since before the syscall line showed it
// asleep, and the copy, the memory the walk read beyond it and the
// registers are of one moment of its sleep, as under a stop. (A kernel
// that keeps no schedstat counts shows zeros; there the syscall line read
// again, the same and not "running", and the status file's
// context-switch counts are the proof: a thread that ran and sleeps again
// has left a CPU.) The syscall line alone would not do: a thread woken
// that sleeps again in the same call from the same frame shows the same
// line (TestAsleepWokeIsStopped).
//
// /proc does not show the frame pointer. A walk from the stack pointer
// by call frame information needs none until a frame's rules locate its
// caller from it (code compiled with frame pointers): a callee that saved
// rbp on the stack (many of libc's functions do) gives its value from the
// copy; where none did, the walk cannot go on, and the thread is stopped
// after all, alone. So is a thread that woke meanwhile, one not in a
// system call (a page fault), and any walk that ended cut short for
// another reason than its depth: a walk from the registers ptrace gives
// could differ there, and the stop's walk is the reference
// (TestAsleepSameAsStopped).

// asleepResult is what reading a sleeping thread without a stop gave.
type asleepResult struct {
	trace unwind.Trace
	// why says why the thread must be stopped after all (asleepRead:
	// trace is its stack).
	why asleepMiss
}

// asleepMiss is why a sleeping thread could not be read without a stop.
type asleepMiss uint8

const (
	asleepRead asleepMiss = iota // read without a stop
	asleepWoke                   // it ran between the reads (or its files could not be read again)
	asleepCut                    // the walk ended short of the thread's first function
	asleepCopy                   // the stack could not be copied
)

// asleepInSyscall says whether a thread's facts allow it to be read
// without a stop: sleeping interruptibly in a system call, with its user
// registers shown.
func asleepInSyscall(st procfs.Status, sc procfs.Syscall) bool {
	return st.State == 'S' && !sc.Running && !sc.NotInSyscall && sc.Nr >= 0 && sc.SP != 0 && sc.PC != 0
}

// readAsleep copies and unwinds the stack of the thread of f, asleep in
// the system call sc, whose status st and schedstat ss were read before
// sc, into dump, and checks afterwards that it did not run meanwhile.
func readAsleep(f *taskFiles, st procfs.Status, ss procfs.Schedstat, sc procfs.Syscall, dump []byte, u *unwind.Process, live unwind.Memory, maxFrames int) asleepResult {
	n := newStackCopier(dump).read(f.tid, sc.SP)
	if n < 8 {
		return asleepResult{why: asleepCopy}
	}
	mem := unwind.Fallback(unwind.DumpMemory(sc.SP, dump[:n]), live)
	tr := u.UnwindTrace(unwind.Regs{IP: sc.PC, SP: sc.SP}, mem, maxFrames)
	if testHookAsleep != nil {
		testHookAsleep(f.tid)
	}
	if !stillAsleep(f, st, ss, sc) {
		return asleepResult{why: asleepWoke}
	}
	if shortOfStart(tr.Cut) {
		return asleepResult{why: asleepCut}
	}
	return asleepResult{trace: tr}
}

// testHookAsleep, when set, runs after a sleeping thread's stack was
// copied and unwound, before the check that it did not run (tests: wake
// it there).
var testHookAsleep func(tid int)

// stillAsleep reports whether the thread has not run since st, ss and sc
// were read (st and ss before sc). Its schedstat read again says so by
// itself: the same CPU time, run delay and count of times put on a CPU
// mean it was not put on one in between, so it stayed asleep as sc saw
// it. Where schedstat says nothing (a kernel that keeps no such counts
// prints zeros), the syscall line read again must be the same, not
// "running", and the status's context-switch counts the same: a thread
// that ran and sleeps again has left a CPU.
func stillAsleep(f *taskFiles, st procfs.Status, ss procfs.Schedstat, sc procfs.Syscall) bool {
	if ss.RunNanos != 0 && ss.Slices != 0 {
		b, err := f.readKept(keptSchedstat)
		if err != nil {
			return false
		}
		ss2, err := procfs.ParseSchedstat(b)
		return err == nil && ss2 == ss
	}
	b, err := f.readKept(keptSyscall)
	if err != nil {
		return false
	}
	if sc2, err := procfs.ParseSyscall(string(b)); err != nil || sc2 != sc {
		return false
	}
	b, err = f.read("status")
	if err != nil {
		return false
	}
	st2, err := procfs.ParseStatus(b)
	return err == nil && st2.State == 'S' &&
		st2.VoluntaryCtxtSwitches == st.VoluntaryCtxtSwitches &&
		st2.NonvoluntaryCtxtSwitches == st.NonvoluntaryCtxtSwitches
}
