package hotspot

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// ParseThreadDump reads HotSpot's thread dump (jcmd Thread.print -l, jstack
// -l, SIGQUIT's output): every thread with its native tid, status, frames
// and the locks on them, the ownable synchronizers each holds, and the
// Java-level deadlocks the VM found. The dump comes from the target:
// lines that are not understood are counted in Problems (with their line
// number), never fatal, and nothing is kept beyond the input's size.
func ParseThreadDump(b []byte) *Java {
	p := &dumpParser{j: &Java{Source: FromThreadDump}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxDumpLine)
	for sc.Scan() {
		p.line++
		p.take(sc.Text())
	}
	if err := sc.Err(); err != nil {
		p.problem("%v", err)
	}
	p.finish()
	return p.j
}

// maxDumpLine bounds one line (a thread name may be long; a frame's is
// bounded by the class file format).
const maxDumpLine = 1 << 20

// maxProblems bounds the problems kept; the rest are counted.
const maxProblems = 32

type dumpParser struct {
	j    *Java
	line int
	mode dumpMode
	t    *JavaThread // the thread being read
	dl   *Deadlock   // the deadlock being read
	link *DeadlockLink
	// Deadlock links name threads; they are resolved to tids at the end.
	linkHolders [][]string
}

type dumpMode int

const (
	modeTop            dumpMode = iota // header, SMR info, between threads
	modeThread                         // a thread's state, frames and locks
	modeOwnable                        // its "Locked ownable synchronizers"
	modeDeadlock                       // a "Found one Java-level deadlock" list
	modeDeadlockStacks                 // its "Java stack information" (a repeat)
)

func (p *dumpParser) problem(format string, args ...any) {
	p.j.problem(fmt.Sprintf("line %d: ", p.line) + fmt.Sprintf(format, args...))
}

func (p *dumpParser) take(l string) {
	switch {
	case strings.HasPrefix(l, "Full thread dump "):
		p.j.VM = strings.TrimSuffix(strings.TrimPrefix(l, "Full thread dump "), ":")
		p.mode = modeTop
		return
	case l == "Found one Java-level deadlock:":
		p.endThread()
		p.j.Deadlocks = append(p.j.Deadlocks, Deadlock{})
		p.dl = &p.j.Deadlocks[len(p.j.Deadlocks)-1]
		p.linkHolders = append(p.linkHolders, nil)
		p.link = nil
		p.mode = modeDeadlock
		return
	case strings.HasPrefix(l, "Found ") && strings.Contains(l, "deadlock"):
		p.mode = modeTop // "Found 1 deadlock.", "Found a total of 2 deadlocks."
		return
	case l == "Java stack information for the threads listed above:":
		p.mode = modeDeadlockStacks
		return
	}
	if h, ok := parseThreadHeader(l); ok && p.mode != modeDeadlockStacks {
		p.endThread()
		p.j.Threads = append(p.j.Threads, h)
		p.t = &p.j.Threads[len(p.j.Threads)-1]
		p.mode = modeThread
		return
	}
	if (p.mode == modeThread || p.mode == modeOwnable) && l != "" && l[0] != ' ' && l[0] != '\t' {
		p.mode = modeTop // "JNI global refs: …" and the like end the thread
		return
	}
	switch p.mode {
	case modeThread:
		p.threadLine(l)
	case modeOwnable:
		p.ownableLine(l)
	case modeDeadlock:
		p.deadlockLine(l)
	}
}

func (p *dumpParser) endThread() {
	p.t = nil
}

// parseThreadHeader reads a thread's first line:
//
//	"transfer-1" #12 daemon prio=5 os_prio=0 cpu=6.95ms elapsed=180.50s tid=0x00007f42dc119c40 nid=0x69eb waiting for monitor entry  [0x00007f42b4bb3000]
//	"VM Thread" os_prio=0 cpu=9.10ms elapsed=180.59s tid=0x00007f42dc0f4430 nid=0x69df runnable
//
// A name may hold quotes and spaces: it ends at the last quote that the
// header's fields follow. JDK 19 and later print nid in decimal.
func parseThreadHeader(l string) (JavaThread, bool) {
	var t JavaThread
	if !strings.HasPrefix(l, `"`) {
		return t, false
	}
	end := -1
	for i := len(l) - 1; i > 0; i-- {
		if l[i] == '"' && headerFieldsFollow(l[i+1:]) {
			end = i
			break
		}
	}
	if end < 0 {
		return t, false
	}
	t.Name = l[1:end]
	fields := strings.Fields(l[end+1:])
	seenNID := false
	for i, f := range fields {
		switch {
		case strings.HasPrefix(f, "#") && i == 0:
			t.JavaID, _ = strconv.ParseInt(f[1:], 10, 64)
		case f == "daemon":
			t.Daemon = true
		case strings.HasPrefix(f, "prio="):
			t.Priority, _ = strconv.Atoi(f[len("prio="):])
		case strings.HasPrefix(f, "nid="):
			v := f[len("nid="):]
			var n uint64
			var err error
			if h, ok := strings.CutPrefix(v, "0x"); ok {
				n, err = strconv.ParseUint(h, 16, 31)
			} else {
				n, err = strconv.ParseUint(v, 10, 31)
			}
			if err != nil {
				return t, false
			}
			t.TID, seenNID = int(n), true
		}
	}
	return t, seenNID
}

// headerFieldsFollow says whether s (what follows a closing quote) is a
// thread header's fields: a Java id, daemon, priorities, then tid= and
// nid=.
func headerFieldsFollow(s string) bool {
	if !strings.HasPrefix(s, " ") {
		return false
	}
	fs := strings.Fields(s)
	for _, f := range fs {
		switch {
		case strings.HasPrefix(f, "#"), f == "daemon", strings.HasPrefix(f, "prio="),
			strings.HasPrefix(f, "os_prio="), strings.HasPrefix(f, "cpu="), strings.HasPrefix(f, "elapsed="),
			strings.HasPrefix(f, "tid="), strings.HasPrefix(f, "allocated="), strings.HasPrefix(f, "defined_classes="):
			continue
		case strings.HasPrefix(f, "nid="):
			return true
		default:
			return false
		}
	}
	return false
}

// threadLine reads a line of a thread's section.
func (p *dumpParser) threadLine(l string) {
	t := p.t
	trimmed := strings.TrimLeft(l, " \t")
	switch {
	case trimmed == "":
	case strings.HasPrefix(trimmed, "java.lang.Thread.State: "):
		t.Status = Status(strings.TrimPrefix(trimmed, "java.lang.Thread.State: "))
	case strings.HasPrefix(trimmed, "at "):
		if len(t.Frames) >= maxFrames {
			t.Cut = ErrTruncated.Error()
			return
		}
		f, ok := parseFrame(strings.TrimPrefix(trimmed, "at "))
		if !ok {
			p.problem("thread %q: not a frame: %q", t.Name, clip(trimmed))
			return
		}
		t.Frames = append(t.Frames, f)
	case strings.HasPrefix(trimmed, "- "):
		p.lockLine(strings.TrimPrefix(trimmed, "- "))
	case trimmed == "Locked ownable synchronizers:":
		p.mode = modeOwnable
	case trimmed == "No compile task", strings.HasPrefix(trimmed, "Compiling: "),
		strings.HasPrefix(trimmed, "Carrying virtual thread #"):
	default:
		p.problem("thread %q: %q", t.Name, clip(trimmed))
	}
}

// lockLine reads a "- locked <0x…> (a java.lang.Object)" line under the
// last frame.
func (p *dumpParser) lockLine(s string) {
	t := p.t
	kind, rest, ok := cutLockKind(s)
	if !ok {
		p.problem("thread %q: not a lock line: %q", t.Name, clip(s))
		return
	}
	if len(t.Frames) == 0 {
		p.problem("thread %q: a lock line before any frame", t.Name)
		return
	}
	f := &t.Frames[len(t.Frames)-1]
	if len(f.Locks) >= maxFrameMonitors {
		return
	}
	obj, ok := parseObjectRef(rest)
	if !ok {
		// "<no object reference available>", "<owner is scalar replaced>"
		obj = Object{}
	}
	f.Locks = append(f.Locks, FrameLock{Kind: kind, Object: obj})
}

// cutLockKind splits a lock line into its kind and the object reference.
func cutLockKind(s string) (FrameLockKind, string, bool) {
	// Longest first: "waiting to re-lock in wait()" before "waiting".
	for _, k := range []FrameLockKind{WaitingToRelock, WaitingToLock, WaitingOn, ParkingFor, Eliminated, Locked} {
		if rest, ok := strings.CutPrefix(s, frameLockText[k]); ok && (rest == "" || rest[0] == ' ') {
			return k, strings.TrimLeft(rest, " "), true
		}
	}
	return 0, "", false
}

// parseObjectRef reads "<0x000000069ec1c100> (a java.lang.Object)".
func parseObjectRef(s string) (Object, bool) {
	var o Object
	addr, rest, ok := strings.Cut(strings.TrimPrefix(s, "<"), ">")
	if !ok || !strings.HasPrefix(s, "<") {
		return o, false
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(addr, "0x"), 16, 64)
	if err != nil || !strings.HasPrefix(addr, "0x") {
		return o, false
	}
	o.Addr = v
	rest = strings.TrimSpace(rest)
	if c, ok := strings.CutPrefix(rest, "(a "); ok {
		o.Class = strings.TrimSuffix(c, ")")
	}
	return o, true
}

// parseFrame reads what follows "at ": "Ledger.settleChecking(Stall.java:35)",
// "java.lang.Thread.sleep(java.base@17.0.15/Native Method)",
// "Stall$$Lambda$1/0x00007f425c001000.run(Unknown Source)".
func parseFrame(s string) (Frame, bool) {
	f := Frame{BCI: -1, Kind: Interpreted}
	open := strings.IndexByte(s, '(')
	if open <= 0 || !strings.HasSuffix(s, ")") {
		return f, false
	}
	qual, loc := s[:open], s[open+1:len(s)-1]
	dot := strings.LastIndexByte(qual, '.')
	if dot <= 0 || dot == len(qual)-1 {
		return f, false
	}
	m := &Method{Class: qual[:dot], Name: qual[dot+1:]}
	f.Method = m
	// "module@version/File.java:12": a file name holds no slash.
	if i := strings.LastIndexByte(loc, '/'); i >= 0 {
		f.Module, loc = loc[:i], loc[i+1:]
	}
	switch {
	case loc == "Native Method":
		f.Kind, m.IsNative = Native, true
	case loc == "Unknown Source":
	default:
		file, line, hasLine := strings.Cut(loc, ":")
		m.File = file
		if hasLine {
			n, err := strconv.Atoi(line)
			if err != nil {
				return f, false
			}
			f.Line = n
		}
	}
	return f, true
}

// ownableLine reads "- <0x…> (a java.util.concurrent.locks.ReentrantLock$NonfairSync)" or "- None".
func (p *dumpParser) ownableLine(l string) {
	s := strings.TrimLeft(l, " \t")
	switch {
	case s == "", s == "- None":
	case strings.HasPrefix(s, "- "):
		o, ok := parseObjectRef(strings.TrimPrefix(s, "- "))
		if !ok {
			p.problem("thread %q: not a synchronizer: %q", p.t.Name, clip(s))
			return
		}
		if len(p.t.Holds) < maxFrameMonitors {
			p.t.Holds = append(p.t.Holds, o)
		}
	default:
		p.problem("thread %q: not a synchronizer: %q", p.t.Name, clip(s))
	}
}

// deadlockLine reads one line of a deadlock's list:
//
//	"transfer-1":
//	  waiting to lock monitor 0x00007f4238066d30 (object 0x000000069ec1c100, a java.lang.Object),
//	  waiting for ownable synchronizer 0x000000069ec1bda0, (a java.util.concurrent.locks.ReentrantLock$NonfairSync),
//	  which is held by "transfer-2"
func (p *dumpParser) deadlockLine(l string) {
	s := strings.TrimSpace(l)
	switch {
	case s == "", strings.Trim(s, "=") == "":
	case strings.HasPrefix(s, `"`) && strings.HasSuffix(s, `":`) && len(s) >= 3:
		if len(p.dl.Links) >= maxThreads {
			return
		}
		p.dl.Links = append(p.dl.Links, DeadlockLink{Name: s[1 : len(s)-2]})
		p.link = &p.dl.Links[len(p.dl.Links)-1]
		p.linkHolders[len(p.linkHolders)-1] = append(p.linkHolders[len(p.linkHolders)-1], "")
	case p.link == nil:
		p.problem("deadlock: %q before any thread", clip(s))
	case strings.HasPrefix(s, "waiting to lock monitor "):
		p.link.Lock = parseDeadlockMonitor(strings.TrimPrefix(s, "waiting to lock monitor "))
	case strings.HasPrefix(s, "waiting for ownable synchronizer "):
		p.link.Lock = parseDeadlockOwnable(strings.TrimPrefix(s, "waiting for ownable synchronizer "))
	case strings.HasPrefix(s, "which is held by "):
		h := strings.TrimPrefix(s, "which is held by ")
		if n, ok := strings.CutPrefix(h, `"`); ok {
			h = strings.TrimSuffix(n, `"`)
		}
		hs := p.linkHolders[len(p.linkHolders)-1]
		hs[len(hs)-1] = h
		p.link.Lock.HolderName = h
	default:
		// "waiting to lock monitor … which is held by …" spans the JNI
		// forms too; what is not understood is said, not guessed.
		p.problem("deadlock: %q", clip(s))
	}
}

// parseDeadlockMonitor reads "0x00007f4238066d30 (object 0x000000069ec1c100, a java.lang.Object),".
func parseDeadlockMonitor(s string) Lock {
	l := Lock{Kind: MonitorLock}
	mon, rest, _ := strings.Cut(s, " ")
	l.Monitor, _ = strconv.ParseUint(strings.TrimPrefix(mon, "0x"), 16, 64)
	rest = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(rest, ","), "(object "), ")")
	obj, class, _ := strings.Cut(rest, ", a ")
	l.Object.Addr, _ = strconv.ParseUint(strings.TrimPrefix(obj, "0x"), 16, 64)
	l.Object.Class = class
	return l
}

// parseDeadlockOwnable reads "0x000000069ec1bda0, (a java.util.concurrent.locks.ReentrantLock$NonfairSync),".
func parseDeadlockOwnable(s string) Lock {
	l := Lock{Kind: OwnableLock}
	obj, rest, _ := strings.Cut(s, ",")
	l.Object.Addr, _ = strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(obj), "0x"), 16, 64)
	rest = strings.TrimSuffix(strings.TrimSpace(rest), ",")
	l.Object.Class = strings.TrimSuffix(strings.TrimPrefix(rest, "(a "), ")")
	return l
}

// finish works out what each thread waits for and who holds it, and
// resolves the deadlocks' thread names to tids.
func (p *dumpParser) finish() {
	j := p.j
	defer j.closeProblems()
	holder := map[uint64]*JavaThread{} // object → the thread that holds it
	for i := range j.Threads {
		t := &j.Threads[i]
		for fi, f := range t.Frames {
			for _, l := range f.Locks {
				if l.Kind == Locked && l.Object.Addr != 0 && !(fi == 0 && waitsOnObject(t, l.Object.Addr)) {
					holder[l.Object.Addr] = t
				}
			}
		}
		for _, o := range t.Holds {
			holder[o.Addr] = t
		}
	}
	for i := range j.Threads {
		t := &j.Threads[i]
		t.WaitsFor = dumpWaitsFor(t, holder)
	}
	kept := j.Deadlocks[:0]
	for _, d := range j.Deadlocks {
		if len(d.Links) == 0 {
			p.problem("a deadlock that names no thread")
			continue
		}
		kept = append(kept, d)
	}
	j.Deadlocks = kept
	byName := map[string][]*JavaThread{}
	for i := range j.Threads {
		byName[j.Threads[i].Name] = append(byName[j.Threads[i].Name], &j.Threads[i])
	}
	for di := range j.Deadlocks {
		d := &j.Deadlocks[di]
		for li := range d.Links {
			l := &d.Links[li]
			l.TID = uniqueTID(byName[l.Name], l.Lock.Object.Addr)
			if h := byName[l.Lock.HolderName]; len(h) > 0 {
				l.Lock.HolderTID = uniqueTID(h, 0)
			}
		}
	}
	if len(j.Deadlocks) == 0 {
		j.Deadlocks = FindDeadlocks(j.Threads)
	}
}

// waitsOnObject says whether t's top frame waits for the object at addr.
func waitsOnObject(t *JavaThread, addr uint64) bool {
	if len(t.Frames) == 0 {
		return false
	}
	for _, l := range t.Frames[0].Locks {
		if l.Kind != Locked && l.Object.Addr == addr {
			return true
		}
	}
	return false
}

// dumpWaitsFor is the lock t's top frame waits to take or parks for.
func dumpWaitsFor(t *JavaThread, holder map[uint64]*JavaThread) *Lock {
	if len(t.Frames) == 0 {
		return nil
	}
	for _, l := range t.Frames[0].Locks {
		var kind LockKind
		switch l.Kind {
		case WaitingToLock, WaitingToRelock:
			kind = MonitorLock
		case ParkingFor:
			kind = OwnableLock
		default:
			continue
		}
		if l.Object.Addr == 0 {
			continue
		}
		lk := &Lock{Kind: kind, Object: l.Object}
		if h := holder[l.Object.Addr]; h != nil && h != t {
			lk.HolderTID, lk.HolderName = h.TID, h.Name
		} else if kind == OwnableLock {
			return nil // parked for something no thread is seen to hold
		}
		return lk
	}
	return nil
}

// uniqueTID picks the tid of the thread a deadlock names: the only one of
// that name, or the one that waits for obj.
func uniqueTID(ts []*JavaThread, obj uint64) int {
	if len(ts) == 1 {
		return ts[0].TID
	}
	for _, t := range ts {
		if obj != 0 && t.WaitsFor != nil && t.WaitsFor.Object.Addr == obj {
			return t.TID
		}
	}
	return 0
}

// clip shortens a line quoted in a problem.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
