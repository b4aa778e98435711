package runtimes

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes/hotspot"
)

// JVM is HotSpot (OpenJDK and its builds): Java, Kotlin, Scala, Clojure.
// Its reader (package runtimes/hotspot) reads its Java threads, their
// frames and locks, its safepoint and its code cache from its memory.
var JVM = &Runtime{
	ID:          "jvm",
	Name:        "JVM",
	Executables: []string{"java", "javaw"},
	Libraries:   []string{"libjvm."},
	Reader:      jvmReader{},
	JIT: &JIT{
		Writer: "jvm",
		// stallwatch asks the JVM itself (package capture, jvm.go).
		Switch: "nothing need be started: stallwatch asks the JVM for its perf map at each capture (jcmd Compiler.perfmap, through its attach mechanism) and reads its code cache when it cannot answer; capture.json's notes say which it did and why a map did not come; " +
			"code compiled after that is named at the next capture; start java with -XX:+PreserveFramePointer for whole Java stacks in samples",
		Writes: func(raw string) bool {
			_, ok := jvmtiParts(raw)
			return ok || isJVMExternal(raw)
		},
		Display: jvmName,
	},
	Pause: &Pause{
		// The VM Thread arms the safepoint and waits for every Java
		// thread to reach a poll (SafepointSynchronize::begin,
		// synchronize_threads), runs the operation
		// (VM_Operation::evaluate, a GC's VM_G1CollectFull and the
		// like), Java threads park in SafepointSynchronize::block; a
		// thread that asked for the operation (System.gc()) waits in
		// VMThread::execute.
		What:      "safepoint",
		Collector: []string{"SafepointSynchronize::begin", "SafepointSynchronize::synchronize_threads"},
		Operation: []string{"VM_Operation::evaluate", "VMThread::evaluate_operation"},
		Waiter: []string{"SafepointSynchronize::block", "SafepointMechanism::process", "VMThread::execute",
			"VMThread::wait_until_executed", "JavaThread::check_safepoint_and_suspend_for_native_trans"},
		NotReached: "runs without reaching a safepoint poll (a counted loop without polls, or long native code that holds the VM in a state that must not be interrupted)",
		Advice:     "-Xlog:safepoint and -Xlog:gc show each pause and the operation; frequent full GCs (System.gc(), a heap too small for the live data) are the usual cause; -XX:+DisableExplicitGC ignores System.gc()",
	},
}

// jvmReader opens HotSpot's reader (package runtimes/hotspot) over the
// libjvm.so a process maps.
type jvmReader struct{}

func (jvmReader) NotRead() string { return "Java threads not read from the JVM's memory" }

// Open reads libjvm.so's VMStructs layout once per target: an error
// wrapping hotspot.ErrNotHotSpot for a process that maps no libjvm.so, a
// *hotspot.MissingError for a HotSpot whose layout the reader does not
// know.
func (jvmReader) Open(p *Process) (Instance, error) {
	for _, img := range p.Images {
		if img.Executable || OfLibrary(img.Path) != JVM {
			continue
		}
		if img.Object == nil {
			return nil, fmt.Errorf("%s: %w", img.Path, img.Err)
		}
		syms, err := img.Object.Lookup(hotspot.SymbolNames())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", img.Path, err)
		}
		j := &jvmInstance{path: img.Path, mem: p.Memory, syms: syms}
		j.layout, err = hotspot.ReadLayout(hotspot.NewReader(j.mem, hotspot.Limits{}), j.syms)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", img.Path, err)
		}
		if _, err := j.vm(); err != nil {
			return nil, fmt.Errorf("%s: %w", img.Path, err)
		}
		return j, nil
	}
	return nil, absent{fmt.Errorf("pid %d maps no libjvm.so: %w", p.PID, hotspot.ErrNotHotSpot)}
}

// jvmInstance is a HotSpot VM's memory and its libjvm.so's layout, read
// once per target, and the locations of its Java frames.
type jvmInstance struct {
	path   string // libjvm.so as the target maps it
	mem    hotspot.Memory
	syms   hotspot.Symbols
	layout *hotspot.Layout
	locs   javaLocs
}

// vm starts one reading of the VM: what it reads, it reads fresh.
func (j *jvmInstance) vm() (*hotspot.VM, error) {
	return hotspot.NewVM(hotspot.NewReader(j.mem, hotspot.Limits{}), j.syms, j.layout)
}

// BoolFlag reads one of the VM's bool -XX flags as it has it now.
func (j *jvmInstance) BoolFlag(name string) (bool, error) {
	vm, err := j.vm()
	if err != nil {
		return false, err
	}
	return vm.BoolFlag(name)
}

// CodeNames reads the JVM's code cache: every compiled method and stub,
// named as its own perf map would name them.
func (j *jvmInstance) CodeNames() ([]Code, error) {
	vm, err := j.vm()
	if err != nil {
		return nil, err
	}
	cc, err := vm.CodeCache()
	if err != nil {
		return nil, err
	}
	out := make([]Code, 0, len(cc.Blobs))
	for _, b := range cc.Blobs {
		if b.End > b.Start {
			out = append(out, Code{Start: b.Start, Size: b.End - b.Start, Name: b.Name})
		}
	}
	return out, cc.Err
}

// A JVM's threads are read twice: natively, as every process's, and as
// the JVM sees them, from its memory through the layout libjvm.so
// publishes (package runtimes/hotspot): each thread's Java name, its Java
// frames in place of the interpreter's and the code cache's frames in
// its native stack, and what it waits for — a monitor or a
// java.util.concurrent lock with the thread holding it (so that the lock
// graph has the Java-level deadlocks), Object.wait, a park, a sleep —
// and, when a safepoint is being reached, the thread it waits for. The
// memory is read with no stop beyond the snapshot's own, once the stops
// are over: a JVM held at a safepoint reads as well as one that runs.
// Threads running Java code have no frame anchor: their frames start at
// the registers of their stop (a thread stuck in a loop is still where
// it was).

// Begin starts a snapshot's reading: nothing is read before the stops.
func (j *jvmInstance) Begin() (Reading, error) {
	return &jvmReading{j: j, regs: map[int]hotspot.Registers{}}, nil
}

// jvmReading is one snapshot's: the registers of each thread's stop.
type jvmReading struct {
	j    *jvmInstance
	regs map[int]hotspot.Registers // tid → registers at its stop
}

// Stop keeps a stopped thread's registers for its Java frames.
func (r *jvmReading) Stop(tid int, st Stop) {
	if st.Stopped {
		r.regs[tid] = hotspot.Registers{PC: st.PC, SP: st.SP, FP: st.FP}
	}
}

// Apply reads the Java threads and puts what they say into the snapshot.
func (r *jvmReading) Apply(snap *model.Snapshot, note func(string, ...any)) {
	start := time.Now()
	vm, err := r.j.vm()
	if err != nil {
		note("Java threads not read from the JVM's memory: %v", err)
		return
	}
	java, err := vm.ReadJava(r.regs)
	if err != nil {
		note("Java threads not read from the JVM's memory: %v", err)
		return
	}
	applyJava(snap, &r.j.locs, java, note)
	note("Java threads: %d read from the JVM's memory (libjvm.so's VMStructs) in %v, with no stop of their own: names, Java frames, monitors and java.util.concurrent locks",
		len(java.Threads), time.Since(start).Round(time.Millisecond))
	for _, p := range java.Problems {
		note("Java threads: %s", p)
	}
}

// ApplyJavaThreadDump puts a JVM's own thread dump (jcmd Thread.print -l,
// what jstack prints; asked through its attach mechanism where its memory
// cannot be read) into a snapshot of it, and draws the lock graph again;
// it returns the Java threads the dump has and what was wrong with it.
func ApplyJavaThreadDump(snap *model.Snapshot, dump []byte, note func(string, ...any)) (threads int, problems []string) {
	java := hotspot.ParseThreadDump(dump)
	applyJava(snap, &javaLocs{}, java, note)
	snap.Locks = model.BuildLockGraph(snap.Threads)
	return len(java.Threads), java.Problems
}

func applyJava(snap *model.Snapshot, locs *javaLocs, java *hotspot.Java, note func(string, ...any)) {
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
			t.User = spliceJava(t.User, javaSegments(locs, jt), java.Code)
		}
		if w := javaWait(java, jt); w != nil {
			t.Wait = w
		}
	}
	safepointWait(snap, java, byTID, note)
}

// javaLocs interns the locations of Java frames: one *Location per method
// and line, as the symbolizer has one per address, so that renderings
// (pprof's locations by pointer) merge them.
type javaLocs struct {
	mu   sync.Mutex
	locs map[javaKey]*model.Location
}

type javaKey struct {
	method uint64
	name   string
	line   int
}

// maxJavaLocs bounds the locations remembered; past it they start over
// (locations already returned stay valid).
const maxJavaLocs = 1 << 16

var javaMapping = &model.Mapping{File: model.JavaMapping, Kind: model.KindJIT, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}

// location is the location of one Java frame: its method as jstack names
// it ("Ledger.settleChecking"), its source file and line; kind jit, in
// the pseudo mapping "[java]", its address the Method's.
func (jl *javaLocs) location(f hotspot.Frame) *model.Location {
	if f.Method == nil {
		return nil
	}
	k := javaKey{method: f.Method.Addr, name: f.Method.String(), line: f.Line}
	jl.mu.Lock()
	defer jl.mu.Unlock()
	if l := jl.locs[k]; l != nil {
		return l
	}
	if jl.locs == nil || len(jl.locs) >= maxJavaLocs {
		jl.locs = map[javaKey]*model.Location{}
	}
	system := f.Method.String()
	if f.Method.Signature != "" {
		system = f.Method.PerfMapName()
	}
	l := &model.Location{
		Addr: f.Method.Addr, Mapping: javaMapping, Kind: model.KindJIT,
		Lines: []model.Line{{Function: f.Method.String(), SystemName: system, File: f.Method.File, Line: int64(f.Line)}},
	}
	jl.locs[k] = l
	return l
}

// javaSegments are a thread's Java frames as locations, run by run (each
// run of Java frames native code called into: hotspot.Stack.Segments).
func javaSegments(locs *javaLocs, jt *hotspot.JavaThread) [][]*model.Location {
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
			if l := locs.location(f); l != nil {
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
		if l == nil || l.IsCut() {
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
		if native[i].IsCut() {
			rest()
		}
		out = append(out, native[i])
		i++
	}
	rest()
	return out
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

// jvmName handles both JVM spellings: HotSpot's own perf map
// ("long Hot.fibonacci(long)": the return type goes) and perf's JVMTI
// agent ("LHot;fibonacci(J)J": class signature, method, JNI descriptor).
func jvmName(raw string) (Name, bool) {
	if p, ok := jvmtiParts(raw); ok {
		return Name{Name: p}, true
	}
	if isJVMExternal(raw) {
		open := strings.IndexByte(raw, '(')
		sp := strings.LastIndexByte(raw[:open], ' ')
		return Name{Name: raw[sp+1:]}, true
	}
	return Name{}, false
}

// isJVMExternal reports whether s looks like "<type> <class>.<method>(...)".
func isJVMExternal(s string) bool {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return false
	}
	sp := strings.LastIndexByte(s[:open], ' ')
	return sp > 0 && strings.IndexByte(s[sp+1:open], '.') > 0 && !strings.Contains(s[:sp], "[")
}

// jvmtiParts decodes "Lpkg/Class;method(args)ret" into
// "pkg.Class.method(args)" with Java type names.
func jvmtiParts(s string) (string, bool) {
	if len(s) < 4 || s[0] != 'L' {
		return "", false
	}
	semi := strings.IndexByte(s, ';')
	open := strings.IndexByte(s, '(')
	if semi < 2 || open < semi+2 {
		return "", false
	}
	closeP := strings.IndexByte(s[open:], ')')
	if closeP < 0 {
		return "", false
	}
	closeP += open
	class := strings.ReplaceAll(s[1:semi], "/", ".")
	method := s[semi+1 : open]
	args, ok := jniTypes(s[open+1 : closeP])
	if !ok || strings.ContainsAny(method, " ;/") {
		return "", false
	}
	if _, ok := jniTypes(s[closeP+1:]); !ok {
		return "", false
	}
	return class + "." + method + "(" + strings.Join(args, ", ") + ")", true
}

// jniTypes decodes a sequence of JNI field descriptors ("JLjava/lang/String;[I").
func jniTypes(s string) ([]string, bool) {
	var out []string
	for len(s) > 0 {
		dims := 0
		for len(s) > 0 && s[0] == '[' {
			dims++
			s = s[1:]
		}
		if s == "" {
			return nil, false
		}
		var t string
		switch s[0] {
		case 'Z':
			t = "boolean"
		case 'B':
			t = "byte"
		case 'C':
			t = "char"
		case 'S':
			t = "short"
		case 'I':
			t = "int"
		case 'J':
			t = "long"
		case 'F':
			t = "float"
		case 'D':
			t = "double"
		case 'V':
			t = "void"
		case 'L':
			end := strings.IndexByte(s, ';')
			if end < 2 {
				return nil, false
			}
			t = strings.ReplaceAll(s[1:end], "/", ".")
			s = s[end:]
		default:
			return nil, false
		}
		s = s[1:]
		out = append(out, t+strings.Repeat("[]", dims))
	}
	return out, true
}
