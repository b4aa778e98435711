package snapshot

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes/hotspot"
	"github.com/stallwatch/stallwatch/target"
)

// A JVM's threads are read twice: natively, as every process's, and as
// the JVM sees them, from its memory through the layout libjvm.so
// publishes (package runtimes/hotspot): each thread's Java name, its Java
// frames in place of the interpreter's and the code cache's frames in
// its native stack, and what it waits for — a monitor or a
// java.util.concurrent lock with the thread holding it (so that the lock
// graph has the Java-level deadlocks), Object.wait, a park, a sleep —
// and, when a safepoint is being reached, the thread it waits for. The
// memory is read with no stop beyond the snapshot's own: a JVM held at
// a safepoint reads as well as one that runs. Threads running Java code
// have no frame anchor: their frames start at the registers of their
// stop, read after it (a thread stuck in a loop is still where it was).

// javaReading is what the snapshot learns of a JVM target.
type javaReading struct {
	jvm  *target.JVM
	regs map[int]hotspot.Registers // tid → registers at its stop
}

// prepareJava finds out whether the target is a HotSpot JVM the reader
// knows (before any stop: the layout is read once per target).
func (tk *taker) prepareJava() {
	if tk.tg == nil || tk.opts.NoJava {
		return
	}
	j, err := tk.tg.JVM()
	switch {
	case errors.Is(err, hotspot.ErrNotHotSpot):
		return
	case err != nil:
		tk.note("Java threads not read from the JVM's memory: %v", err)
		return
	}
	tk.java = &javaReading{jvm: j, regs: map[int]hotspot.Registers{}}
}

// keepRegs keeps a stopped thread's registers for its Java frames.
func (tk *taker) keepRegs(tid int, r unwind.Regs) {
	if tk.java != nil {
		tk.java.regs[tid] = hotspot.Registers{PC: r.IP, SP: r.SP, FP: r.BP}
	}
}

// readJava reads the Java threads and puts what they say into the
// snapshot's threads (after their native stacks are named).
func (tk *taker) readJava() {
	if tk.java == nil {
		return
	}
	start := time.Now()
	vm, err := tk.java.jvm.VM()
	if err != nil {
		tk.note("Java threads not read from the JVM's memory: %v", err)
		return
	}
	java, err := vm.ReadJava(tk.java.regs)
	if err != nil {
		tk.note("Java threads not read from the JVM's memory: %v", err)
		return
	}
	tk.applyJava(java)
	tk.note("Java threads: %d read from the JVM's memory (libjvm.so's VMStructs) in %v, with no stop of their own: names, Java frames, monitors and java.util.concurrent locks",
		len(java.Threads), time.Since(start).Round(time.Millisecond))
	for _, p := range java.Problems {
		tk.note("Java threads: %s", p)
	}
}

// applyJava puts a reading of the JVM's threads into the snapshot.
func (tk *taker) applyJava(java *hotspot.Java) {
	applyJava(tk.snap, tk.tg, java, tk.note)
}

// ApplyJava puts a reading of a JVM's threads made apart from the
// snapshot — the JVM's own thread dump (Thread.print, through its attach
// mechanism), where its memory cannot be read — into a snapshot of it,
// notes where it came from, and draws the lock graph again.
func ApplyJava(snap *model.Snapshot, tp *target.Process, java *hotspot.Java) {
	notes := map[string]bool{}
	for _, n := range snap.Notes {
		notes[n] = true
	}
	applyJava(snap, tp, java, func(format string, args ...any) {
		if n := fmt.Sprintf(format, args...); !notes[n] {
			notes[n] = true
			snap.Notes = append(snap.Notes, n)
		}
	})
	snap.Locks = model.BuildLockGraph(snap.Threads)
}

func applyJava(snap *model.Snapshot, tp *target.Process, java *hotspot.Java, note func(string, ...any)) {
	byTID := snap.ByTID()
	for i := range java.Threads {
		jt := &java.Threads[i]
		t := byTID[jt.TID]
		if t == nil {
			continue
		}
		if jt.Name != "" {
			t.Name = jt.Name
		}
		if len(jt.Frames) > 0 {
			t.User = spliceJava(t.User, javaSegments(tp, jt), java.Code)
		}
		if w := javaWait(java, jt); w != nil {
			t.Wait = w
		}
	}
	safepointWait(snap, java, byTID, note)
}

// javaSegments are a thread's Java frames as locations, run by run (each
// run of Java frames native code called into: hotspot.Stack.Segments).
func javaSegments(tp *target.Process, jt *hotspot.JavaThread) [][]*model.Location {
	bounds := jt.Segments
	if len(bounds) == 0 {
		bounds = []int{0}
	}
	var out [][]*model.Location
	for k, start := range bounds {
		end := len(jt.Frames)
		if k+1 < len(bounds) {
			end = bounds[k+1]
		}
		if start < 0 || start > end || end > len(jt.Frames) {
			break
		}
		var seg []*model.Location
		for _, f := range jt.Frames[start:end] {
			if l := tp.JavaLocation(f); l != nil {
				seg = append(seg, l)
			}
		}
		out = append(out, seg)
	}
	return out
}

// spliceJava puts a thread's Java frames (innermost first) in place of the
// native frames that run in the code cache (the interpreter, compiled
// methods, stubs): each run of such frames in the native stack gets the
// next run of Java frames (native code that calls Java again, JNI or
// reflection, parts them); the native frames around them stay. Java
// frames the native stack has no run for (its walk stopped in the VM) go
// at its end, before the pseudo-frame saying why it ends. Without the
// code cache's range (a thread dump has none), its frames are those in
// anonymous memory.
func spliceJava(native []*model.Location, java [][]*model.Location, code [2]uint64) []*model.Location {
	inCode := func(l *model.Location) bool {
		if l == nil || isCut(l) {
			return false
		}
		if code[1] == 0 {
			return l.Mapping != nil && l.Mapping.File == "[anon]"
		}
		return l.Addr >= code[0] && l.Addr < code[1]
	}
	out := make([]*model.Location, 0, len(native)+len(java))
	rest := func() {
		for _, seg := range java {
			out = append(out, seg...)
		}
		java = nil
	}
	for i := 0; i < len(native); {
		if inCode(native[i]) && len(java) > 0 {
			out = append(out, java[0]...)
			java = java[1:]
			for i < len(native) && inCode(native[i]) {
				i++
			}
			continue
		}
		if isCut(native[i]) {
			rest()
		}
		out = append(out, native[i])
		i++
	}
	rest()
	return out
}

// isCut says whether l is the pseudo-frame that says why a stack ends.
func isCut(l *model.Location) bool {
	return l != nil && len(l.Lines) == 1 && strings.HasPrefix(l.Lines[0].Function, "[truncated")
}

// javaWait says what a Java thread waits for, as the JVM knows it: a lock
// and the thread holding it, else an Object.wait, a park or a sleep.
func javaWait(java *hotspot.Java, jt *hotspot.JavaThread) *model.Wait {
	if l := jt.WaitsFor; l != nil {
		w := &model.Wait{Kind: "java monitor", Owner: l.HolderTID}
		what := "Java monitor"
		if l.Kind == hotspot.OwnableLock {
			w.Kind, what = "java lock", "java.util.concurrent lock"
		}
		w.Desc = fmt.Sprintf("%s %s", what, objectText(l.Object))
		if l.HolderTID != 0 {
			w.Desc += fmt.Sprintf(", held by tid %d %q", l.HolderTID, l.HolderName)
			if w.OwnerSite = lockedIn(java.Thread(l.HolderTID), l.Object.Addr); w.OwnerSite != "" {
				w.Desc += " (locked in " + w.OwnerSite + ")"
			}
		}
		return w
	}
	var top *hotspot.Frame
	if len(jt.Frames) > 0 {
		top = &jt.Frames[0]
	}
	obj := func(k hotspot.FrameLockKind) string {
		if top == nil {
			return ""
		}
		for _, l := range top.Locks {
			if l.Kind == k && l.Object.Addr != 0 {
				return " " + objectText(l.Object)
			}
		}
		return ""
	}
	switch jt.Status {
	case hotspot.StatusWaitingMonitor, hotspot.StatusTimedWaitMonitor:
		return &model.Wait{Kind: "java wait", Desc: "Object.wait on" + obj(hotspot.WaitingOn) + ", for a notify" + timed(jt.Status)}
	case hotspot.StatusParked, hotspot.StatusTimedParked:
		return &model.Wait{Kind: "java park", Desc: "LockSupport.park for" + obj(hotspot.ParkingFor) + ", for an unpark" + timed(jt.Status)}
	case hotspot.StatusSleeping:
		return &model.Wait{Kind: "java sleep", Desc: "Thread.sleep"}
	}
	return nil
}

func timed(s hotspot.Status) string {
	if strings.HasPrefix(string(s), "TIMED_") {
		return " or a timeout"
	}
	return ""
}

// objectText is an object as jstack prints it: "<0x000000069ec1c100> (a java.lang.Object)".
func objectText(o hotspot.Object) string {
	return fmt.Sprintf("<%#016x> (a %s)", o.Addr, o.Class)
}

// lockedIn is the frame of t that holds the monitor of obj: "Ledger.settleChecking (Stall.java:35)".
func lockedIn(t *hotspot.JavaThread, obj uint64) string {
	if t == nil {
		return ""
	}
	for _, f := range t.Frames {
		for _, l := range f.Locks {
			if l.Kind == hotspot.Locked && l.Object.Addr == obj {
				return frameText(f)
			}
		}
	}
	return ""
}

func frameText(f hotspot.Frame) string {
	if f.Method.File != "" && f.Line > 0 {
		return fmt.Sprintf("%s (%s:%d)", f.Method, f.Method.File, f.Line)
	}
	return f.Method.String()
}

// safepointWait makes the VM Thread wait for the thread a synchronizing
// safepoint waits for: the Java threads that reached it wait for the VM
// Thread (their native stacks are in SafepointSynchronize::block), so the
// lock graph's chain ends at the thread holding everyone up.
func safepointWait(snap *model.Snapshot, java *hotspot.Java, byTID map[int]*model.Thread, note func(string, ...any)) {
	sp := java.Safepoint
	if sp == nil || sp.State != hotspot.Synchronizing {
		return
	}
	var lag []*hotspot.JavaThread
	for i := range java.Threads {
		if java.Threads[i].Laggard {
			lag = append(lag, &java.Threads[i])
		}
	}
	op := "a VM operation"
	if sp.Operation != "" {
		op = sp.Operation
	}
	since := ""
	if sp.Began > 0 && uint64(sp.Began) < snap.Mono {
		since = fmt.Sprintf(", begun %v before the snapshot", (time.Duration(snap.Mono) - sp.Began).Round(time.Millisecond))
	}
	if len(lag) == 0 {
		note("the JVM is reaching a safepoint for %s%s; no Java thread holds it up", op, since)
		return
	}
	var names []string
	for _, t := range lag {
		n := fmt.Sprintf("tid %d %q (%s", t.TID, t.Name, t.VMState)
		if len(t.Frames) > 0 {
			n += ", in " + frameText(t.Frames[0])
		}
		names = append(names, n+")")
	}
	desc := fmt.Sprintf("the JVM's safepoint for %s%s, which waits for %s to reach a safepoint poll", op, since, strings.Join(names, ", "))
	note("%s", strings.ToUpper(desc[:1])+desc[1:])
	for _, t := range byTID {
		if t.Name == "VM Thread" {
			t.Wait = &model.Wait{Kind: "safepoint", Owner: lag[0].TID, Desc: desc}
			return
		}
	}
}
