package unwind

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"golang.org/x/sys/unix"
)

// blockedTarget runs testdata/blocked and returns its pid and the tids it
// names, once every named thread is asleep in the kernel.
func blockedTarget(t *testing.T) (int, map[string]int) {
	t.Helper()
	testutil.RequirePtrace(t)
	bin := testutil.BuildC(t, "blocked/blocked.c")
	tg := testutil.Start(t, bin)
	line := tg.WaitLine(t, "ready ", 10*time.Second)
	named := map[string]int{}
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("bad ready line %q", line)
		}
		named[k] = n
	}
	// Each thread asleep in the system call it blocks in for good (the
	// signaled one in its handler's sleep, not still in the tgkill that
	// raised the signal, where a preempted thread shows too).
	for _, name := range blockedThreads {
		tid, nr := named[name], blockedIn[name]
		err := testutil.Eventually(10*time.Second, func() bool {
			sc, err := procfs.ReadSyscall(tg.Pid, tid)
			st, serr := procfs.ReadStatus(tg.Pid, tid)
			return err == nil && serr == nil && !sc.Running && sc.Nr == nr && st.State == 'S'
		})
		if err != nil {
			sc, _ := procfs.ReadSyscall(tg.Pid, tid)
			t.Fatalf("thread %s (%d) never blocked in system call %d (now %+v)", name, tid, nr, sc)
		}
	}
	return tg.Pid, named
}

// blockedIn is the system call each thread of testdata/blocked sleeps in
// (glibc's nanosleep is clock_nanosleep).
var blockedIn = map[string]int{
	"sleeper": unix.SYS_CLOCK_NANOSLEEP, "reader": unix.SYS_READ, "holder": unix.SYS_READ,
	"locker": unix.SYS_FUTEX, "piwaiter": unix.SYS_FUTEX, "signaled": unix.SYS_CLOCK_NANOSLEEP,
}

var blockedThreads = []string{"sleeper", "reader", "holder", "locker", "piwaiter", "signaled"}

// gdbFrame is one frame as gdb's unwinder sees it.
type gdbFrame struct {
	pc   uint64
	name string
}

// gdbStacks asks gdb for every thread's frames (the ground truth), those
// a walk of the stack finds (not inline or tail-call frames).
func gdbStacks(t *testing.T, pid int) map[int][]gdbFrame {
	t.Helper()
	out := map[int][]gdbFrame{}
	for tid, frames := range testutil.GDBStacks(t, pid) {
		for _, f := range testutil.Real(frames) {
			out[tid] = append(out[tid], gdbFrame{f.PC, f.Name})
		}
	}
	return out
}

// matchGdb checks that ours holds gdb's frames, in order, from the top.
// gdb stops at main; we go on to _start, so ours may be longer.
func matchGdb(t *testing.T, what string, ours []uint64, gdb []gdbFrame) {
	t.Helper()
	if len(ours) < len(gdb) {
		t.Errorf("%s: %d frames, gdb has %d:\n ours %s\n  gdb %s", what, len(ours), len(gdb), hexList(ours), gdbList(gdb))
		return
	}
	for i, g := range gdb {
		if ours[i] != g.pc {
			t.Errorf("%s: frame %d is %#x, gdb says %#x (%s):\n ours %s\n  gdb %s", what, i, ours[i], g.pc, g.name, hexList(ours), gdbList(gdb))
			return
		}
	}
}

func hexList(pcs []uint64) string {
	s := make([]string, len(pcs))
	for i, pc := range pcs {
		s[i] = fmt.Sprintf("%#x", pc)
	}
	return strings.Join(s, " ")
}

func gdbList(fr []gdbFrame) string {
	s := make([]string, len(fr))
	for i, f := range fr {
		s[i] = fmt.Sprintf("%#x:%s", f.pc, f.name)
	}
	return strings.Join(s, " ")
}

// stopped is what a test reads of a thread under a brief ptrace stop.
type stopped struct {
	regs Regs
	dump []byte
}

// ptraceStop seizes tid, stops it, copies its registers and the top of
// its stack, and lets it go. The whole sequence runs on one OS thread.
func ptraceStop(t testing.TB, pid, tid int) stopped {
	t.Helper()
	type result struct {
		s   stopped
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		defer func() { ch <- r }()
		if r.err = unix.PtraceSeize(tid); r.err != nil {
			return
		}
		defer unix.PtraceDetach(tid)
		if r.err = unix.PtraceInterrupt(tid); r.err != nil {
			return
		}
		var ws unix.WaitStatus
		for deadline := time.Now().Add(5 * time.Second); ; {
			wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
			if err != nil || wpid == tid {
				r.err = err
				break
			}
			if time.Now().After(deadline) {
				r.err = fmt.Errorf("thread %d did not stop", tid)
				// Leave the thread locked: its exit detaches.
				runtime.Goexit()
			}
			time.Sleep(time.Millisecond)
		}
		if r.err != nil {
			return
		}
		var regs unix.PtraceRegs
		if r.err = unix.PtraceGetRegs(tid, &regs); r.err != nil {
			return
		}
		r.s.regs = Regs{IP: regs.Rip, SP: regs.Rsp, BP: regs.Rbp, BPKnown: true}
		r.s.dump = make([]byte, 32<<10)
		r.s.dump = r.s.dump[:addrspace.NewMemory(pid).ReadPartial(r.s.dump, regs.Rsp)]
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("ptrace stop of %d: %v", tid, r.err)
	}
	return r.s
}

// openProcess reads the address space of pid and prepares to unwind it.
func openProcess(t testing.TB, pid int) (*Process, *addrspace.Space) {
	t.Helper()
	space, err := addrspace.Open(pid, addrspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { space.Close() })
	return NewProcess(space), space
}

// TestBlockedThreadsMatchGdb: for threads blocked in nanosleep, read,
// mutex waits (plain and PI) and inside a signal handler, the stack read
// without stopping them (BlockedTrace) and the stack unwound from
// registers taken under a ptrace stop both match gdb's frames exactly,
// and both contain the C function that called into libc.
func TestBlockedThreadsMatchGdb(t *testing.T) {
	pid, named := blockedTarget(t)
	p, space := openProcess(t, pid)
	for _, pr := range p.Problems() {
		t.Logf("problem: %s", pr)
	}
	blocked := map[int]Trace{}
	for _, name := range blockedThreads {
		tid := named[name]
		tr, err := p.BlockedTrace(tid, MaxFrames)
		if err != nil {
			t.Fatalf("BlockedTrace(%d): %v", tid, err)
		}
		blocked[tid] = tr
	}
	regsTraces := map[int]Trace{}
	for _, tid := range named {
		if _, ok := blocked[tid]; !ok {
			continue
		}
		st := ptraceStop(t, pid, tid)
		regsTraces[tid] = p.UnwindTrace(st.regs, Fallback(DumpMemory(st.regs.SP, st.dump), space.Memory()), MaxFrames)
	}
	gdb := gdbStacks(t, pid)
	for _, name := range blockedThreads {
		tid := named[name]
		tr := blocked[tid]
		g := gdb[tid]
		if len(g) == 0 {
			t.Fatalf("gdb has no stack for %s (%d)", name, tid)
		}
		t.Logf("%s: blocked %s via %s, end %v", name, hexList(tr.PCs), tr.Methods(), tr.Cut)
		matchGdb(t, name+" (no stop)", tr.PCs, g)
		matchGdb(t, name+" (ptrace regs)", regsTraces[tid].PCs, g)
		if tr.Cut.Truncated() {
			t.Errorf("%s: walk ended with %v, want the end of the stack", name, tr.Cut)
		}
		// Without a stop rbp is unknown: the first C frame based on it
		// is found by the scan. With registers, CFI alone.
		if m := tr.Methods(); m != "cfi" && m != "cfi+scan" {
			t.Errorf("%s: unwound without a stop by %s, want cfi (+scan)", name, m)
		}
		if m := regsTraces[tid].Methods(); m != "cfi" {
			t.Errorf("%s: unwound from registers by %s, want cfi only (every module here has CFI)", name, m)
		}
	}
}

// TestUnwindSample: a frame-pointer chain like the kernel's perf
// callchain loses the C function that called into libc (libc has no frame
// pointers); UnwindSample, given the registers and a copy of the stack as
// perf takes them, gives back gdb's frames — whole when the copy holds the
// stack, joined with the kernel's chain when it does not.
func TestUnwindSample(t *testing.T) {
	pid, named := blockedTarget(t)
	p, space := openProcess(t, pid)
	stops := map[string]stopped{}
	for _, name := range []string{"locker", "reader", "sleeper"} {
		stops[name] = ptraceStop(t, pid, named[name])
	}
	gdb := gdbStacks(t, pid)
	live := space.Memory()
	for name, st := range stops {
		g := gdb[named[name]]
		if len(g) < 5 {
			t.Fatalf("%s: gdb stack %v", name, gdbList(g))
		}
		fp := FramePointer().Unwind(st.regs, Fallback(DumpMemory(st.regs.SP, st.dump), live), MaxFrames)
		whole, cut := p.UnwindSample(Sample{Regs: st.regs, Stack: st.dump, FP: fp}, MaxFrames, nil)
		t.Logf("%s: fp %s → unwound %s (%v)", name, hexList(fp), hexList(whole), cut)
		matchGdb(t, name+" whole copy", whole, g)
		if len(whole) != len(g) || cut.Truncated() {
			t.Errorf("%s: %d frames (%v) from the whole stack, gdb has %d", name, len(whole), cut, len(g))
		}
		// Shorter copies hold the frames inside libc but not the rest:
		// the kernel's chain is joined on a return address both found,
		// and ends where frame pointers end (in start_thread), cut
		// because the copy was exhausted (libc has CFI: a larger copy
		// is the fix, not unwind information). No size may give a
		// frame gdb does not have.
		last := fp[len(fp)-1]
		joined := false
		for size := 64; size < len(st.dump); size += 32 {
			short, cut := p.UnwindSample(Sample{Regs: st.regs, Stack: st.dump[:size], FP: fp}, MaxFrames, nil)
			matchGdb(t, fmt.Sprintf("%s copy of %d bytes", name, size), short, g[:min(len(g), len(short))])
			if len(short) > len(fp) && short[len(short)-1] == last {
				joined = true
				if cut.Reason != CopyExhausted || cut.Limit != size {
					t.Errorf("%s copy of %d bytes: joined stack ends with %v, want the %d-byte copy exhausted", name, size, cut, size)
				}
			}
			if !cut.Truncated() {
				break // the copy holds the whole stack from here on
			}
		}
		if !joined {
			t.Errorf("%s: no short copy was joined with the frame-pointer chain", name)
		}
	}
}

// TestRefreshKeepsUnchangedLayout: a Refresh over maps that did not
// change keeps the layout's generation (the rule cache's entries stay
// good: samples read the maps again when they meet an address they do
// not know, and most such reads find nothing new); one that finds new
// executable memory starts a new generation that holds it.
func TestRefreshKeepsUnchangedLayout(t *testing.T) {
	space, err := addrspace.Open(os.Getpid(), addrspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer space.Close()
	p := NewProcess(space)
	gen := p.gen
	if err := space.Refresh(); err != nil {
		t.Fatal(err)
	}
	p.Refresh()
	if p.gen != gen {
		t.Errorf("generation %d after a Refresh that found the same maps, was %d", p.gen, gen)
	}
	code, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(code)
	addr := uint64(uintptr(unsafe.Pointer(&code[0])))
	if err := space.Refresh(); err != nil {
		t.Fatal(err)
	}
	p.Refresh()
	w := p.walker(nil, 0)
	if p.gen == gen || w.find(addr) == nil {
		t.Errorf("generation %d (was %d), new code at %#x found: %v", p.gen, gen, addr, w.find(addr) != nil)
	}
}
