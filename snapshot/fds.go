package snapshot

import (
	"github.com/stallwatch/stallwatch/internal/fdtarget"
)

// resolveFDs says what every descriptor a thread waits on is connected
// to, all at once (one scan for the processes at the other ends, one
// read of each socket table), and describes those threads' system calls
// and waits again with it: "recvfrom(fd 5 → TCP 10.0.0.5:5432
// (ESTABLISHED, 0 bytes queued; from 10.0.0.7:40122) — pid 812
// (postgres), sleeping)".
func (tk *taker) resolveFDs() {
	if len(tk.fds) == 0 {
		return
	}
	res := fdtarget.Resolve(tk.pid, tk.fds, fdtarget.Options{Syscall: fdSyscallName})
	for _, n := range res.Notes {
		tk.note("what threads wait on: %s", n)
	}
	raw := linkNamer(tk.pid)
	name := func(fd int) string {
		if t, ok := res.Targets[fd]; ok && t.Link != "" {
			return t.String()
		}
		return raw(fd)
	}
	for i := range tk.snap.Threads {
		t := &tk.snap.Threads[i]
		if t.Syscall == nil || t.Wait == nil || !namesFDs(t.Syscall.Nr) {
			continue
		}
		kind := t.Wait.Kind
		var fds []int
		t.Wait, fds = describe(t.Syscall, tk.mem, name)
		t.Wait.Kind = kind
		if target, ok := res.Targets[firstFD(fds)]; ok && fdSyscalls[t.Syscall.Nr] && target.Link != "" {
			t.Wait.On = target.Model()
		}
	}
}

func firstFD(fds []int) int {
	if len(fds) == 0 {
		return -1
	}
	return fds[0]
}

// namesFDs reports whether describe names descriptors for system call nr.
func namesFDs(nr int) bool {
	return fdSyscalls[nr] || nr == sysPoll || nr == sysPpoll
}

// fdSyscallName names a system call whose first argument is a
// descriptor it blocks on: what a thread of the process at the other end
// of a pipe or socket is doing with it.
func fdSyscallName(nr int) (string, bool) {
	if !fdSyscalls[nr] {
		return "", false
	}
	return syscallName(nr), true
}
