package sampler

import (
	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/kallsyms"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// blockedNow looks at thread tid through /proc at time now, just after its
// context-switch event was enabled. A thread that is not runnable is off
// the CPU since before we looked: the interval opens now, with the stack
// /proc shows (kernel frames by name, resolved through kallsyms; the user
// PC and stack pointer from the syscall file, the user stack from
// BlockedStack, and the top of the user stack read with
// process_vm_readv). The thread is never stopped.
func (s *Sampler) blockedNow(tid int, now uint64) (blocked *Sample, runnable bool, kernel []procfs.KernelFrame) {
	st, err := procfs.ReadStat(s.pid, tid)
	if err != nil {
		return nil, false, nil
	}
	switch st.State {
	case 'R':
		return nil, true, nil
	case 'Z', 'X', 'x':
		return nil, false, nil
	}
	smp := &Sample{Kind: OffCPU, Time: now, PID: int32(s.pid), TID: int32(tid), CPU: int32(st.Processor)}
	if s.cfg.Kernel {
		// Root only; others get the user part alone.
		kernel, _ = procfs.ReadKernelStack(s.pid, tid)
	}
	sc, err := procfs.ReadSyscall(s.pid, tid)
	if err != nil || sc.Running {
		return smp, false, kernel
	}
	var user []uint64
	if s.cfg.BlockedStack != nil {
		if u, cut, err := s.cfg.BlockedStack(tid); err == nil {
			user, smp.Cut = u, cut
		} else {
			s.log.Debug("blocked stack", "tid", tid, "err", err)
		}
	}
	if len(user) == 0 && sc.PC != 0 {
		user = []uint64{sc.PC}
	}
	smp.Stack = append(smp.Stack, user...)
	s.annotate(smp)
	if s.cfg.UserStack == nil {
		// Kept for an unwinder after sampling.
		smp.Regs = UserRegs{IP: sc.PC, SP: sc.SP}
		if s.dumpOff > 0 && sc.SP != 0 {
			smp.StackDump = readStack(s.pid, sc.SP, s.dumpOff)
		}
	}
	return smp, false, kernel
}

// warmKallsyms reads the kernel symbol table and builds its name index
// (about 0.1 s each), so that kernelAddrs is quick under the lock.
func warmKallsyms() {
	if tab, err := kallsyms.Load(); err == nil {
		tab.Addr("")
	}
}

// kernelAddrs turns /proc/<pid>/task/<tid>/stack's function+offset frames
// into addresses. Frames kallsyms cannot place are left out; with
// kptr_restrict hiding addresses there are none.
func kernelAddrs(frames []procfs.KernelFrame) []uint64 {
	tab, err := kallsyms.Load()
	if err != nil || tab.Hidden() {
		return nil
	}
	out := make([]uint64, 0, len(frames))
	for _, f := range frames {
		if base, ok := tab.Addr(f.Symbol); ok {
			out = append(out, base+f.Offset)
		}
	}
	return out
}

// readStack reads up to n bytes of the target's memory from sp up: a stack
// that ends before n bytes still yields what it holds.
func readStack(pid int, sp uint64, n int) []byte {
	buf := make([]byte, n)
	return buf[:addrspace.NewMemory(pid).ReadPartial(buf, sp)]
}
