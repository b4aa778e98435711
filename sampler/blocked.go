package sampler

import (
	"github.com/stallwatch/stallwatch/internal/kallsyms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"golang.org/x/sys/unix"
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
	smp.Regs = UserRegs{IP: sc.PC, SP: sc.SP}
	var user []uint64
	if s.cfg.BlockedStack != nil {
		if u, err := s.cfg.BlockedStack(tid); err == nil {
			user = u
		} else {
			s.log.Debug("blocked stack", "tid", tid, "err", err)
		}
	}
	if len(user) == 0 && sc.PC != 0 {
		user = []uint64{sc.PC}
	}
	smp.Stack = append(smp.Stack, user...)
	if s.dumpOff > 0 && sc.SP != 0 {
		smp.StackDump = readStack(s.pid, sc.SP, s.dumpOff)
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

// readStack reads up to n bytes of the target's memory from sp up, page by
// page so that a stack ending before n bytes still yields what it holds.
func readStack(pid int, sp uint64, n int) []byte {
	buf := make([]byte, n)
	const page = 4096
	var local []unix.Iovec
	var remote []unix.RemoteIovec
	for off := 0; off < n; {
		chunk := min(n-off, int(page-(sp+uint64(off))%page))
		local = append(local, unix.Iovec{Base: &buf[off]})
		local[len(local)-1].SetLen(chunk)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(sp) + uintptr(off), Len: chunk})
		off += chunk
	}
	got, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil || got <= 0 {
		return nil
	}
	return buf[:got]
}
