package hotspot

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// deadlockText is a deadlock as a sentence, to compare two readings.
func deadlockText(d Deadlock) string {
	var parts []string
	for _, l := range d.Links {
		parts = append(parts, strings.Join([]string{l.Name, l.Lock.Kind.String(), l.Lock.Object.Class, l.Lock.HolderName}, "|"))
	}
	return strings.Join(parts, " → ")
}

func deadlocksText(j *Java) []string {
	var out []string
	for _, d := range j.Deadlocks {
		out = append(out, deadlockText(d))
	}
	return out
}

// TestMemoryDeadlock: a synchronized deadlock read from memory names
// what jstack names: every Java thread with its status and frames, and
// the deadlock between transfer-1 and transfer-2 on their two monitors.
// With compressed oops and class pointers (the default) and without.
func TestMemoryDeadlock(t *testing.T) {
	testutil.RequirePtrace(t)
	for _, flags := range [][]string{
		nil,
		{"-XX:-UseCompressedOops"},
		{"-XX:-UseCompressedOops", "-XX:-UseCompressedClassPointers"},
	} {
		t.Run(strings.Join(append([]string{"default"}, flags...), " "), func(t *testing.T) { memoryDeadlock(t, flags) })
	}
}

func memoryDeadlock(t *testing.T, flags []string) {
	tg := startStall(t, flags, "deadlock")
	out, ok := jstack(t, tg.Pid, time.Minute)
	if !ok {
		t.Fatal("jstack did not answer")
	}
	dump := ParseThreadDump(out)
	if len(dump.Problems) > 0 {
		t.Errorf("jstack's dump read with problems: %q", dump.Problems)
	}
	mem := readMemory(t, tg.Pid, nil)
	sameThreads(t, mem, dump)
	if len(mem.Deadlocks) != 1 || len(dump.Deadlocks) != 1 {
		t.Fatalf("deadlocks: memory %q, jstack %q", deadlocksText(mem), deadlocksText(dump))
	}
	got, want := mem.Deadlocks[0], dump.Deadlocks[0]
	if g, w := deadlockText(got), deadlockText(want); g != w {
		t.Errorf("memory's deadlock %s, jstack's %s", g, w)
	}
	for i, l := range got.Links {
		w := want.Links[i]
		if l.TID != w.TID || l.Lock.Object.Addr != w.Lock.Object.Addr || l.Lock.Monitor != w.Lock.Monitor || l.Lock.HolderTID != w.Lock.HolderTID {
			t.Errorf("link %d: memory %+v, jstack %+v", i, l, w)
		}
	}
	names := []string{got.Links[0].Name, got.Links[1].Name}
	slices.Sort(names)
	if !slices.Equal(names, []string{"transfer-1", "transfer-2"}) {
		t.Errorf("deadlocked threads %q", names)
	}
}

// TestMemoryLockDeadlock: a ReentrantLock deadlock read from memory is the
// one jstack finds, through the parked threads' blockers and their
// exclusive owners.
func TestMemoryLockDeadlock(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := startStall(t, nil, "lockdeadlock")
	out, ok := jstack(t, tg.Pid, time.Minute)
	if !ok {
		t.Fatal("jstack did not answer")
	}
	dump := ParseThreadDump(out)
	mem := readMemory(t, tg.Pid, nil)
	sameThreads(t, mem, dump)
	if g, w := deadlocksText(mem), deadlocksText(dump); !slices.Equal(g, w) || len(g) != 1 {
		t.Fatalf("deadlocks: memory %q, jstack %q", g, w)
	}
	for i, l := range mem.Deadlocks[0].Links {
		w := dump.Deadlocks[0].Links[i]
		if l.Lock.Kind != OwnableLock || l.TID != w.TID || l.Lock.Object.Addr != w.Lock.Object.Addr || l.Lock.HolderTID != w.Lock.HolderTID {
			t.Errorf("link %d: memory %+v, jstack %+v", i, l, w)
		}
	}
}

// TestMemoryParked: a thread parked in LockSupport.park(blocker) is
// WAITING (parking) with its blocker on its top frame, as jstack says, and
// waits for no thread.
func TestMemoryParked(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := startStall(t, nil, "park")
	out, ok := jstack(t, tg.Pid, time.Minute)
	if !ok {
		t.Fatal("jstack did not answer")
	}
	dump := ParseThreadDump(out)
	mem := readMemory(t, tg.Pid, nil)
	sameThreads(t, mem, dump)
	var parked *JavaThread
	for i := range mem.Threads {
		if mem.Threads[i].Name == "parked-1" {
			parked = &mem.Threads[i]
		}
	}
	if parked == nil {
		t.Fatal("parked-1 not read")
	}
	if parked.Status != StatusParked || parked.WaitsFor != nil || len(mem.Deadlocks) != 0 {
		t.Errorf("parked-1: %s, waits for %+v; deadlocks %q", parked.Status, parked.WaitsFor, deadlocksText(mem))
	}
	if len(parked.Frames) == 0 || parked.Frames[0].Method.String() != "jdk.internal.misc.Unsafe.park" ||
		len(parked.Frames[0].Locks) != 1 || parked.Frames[0].Locks[0].Kind != ParkingFor || parked.Frames[0].Locks[0].Object.Class != "java.lang.Class" {
		t.Errorf("parked-1's frames:\n%s", stackText(parked.Frames))
	}
}

// TestMemorySafepoint: a JVM held at a safepoint by a thread in a counted
// loop without polls does not answer jstack; its memory still names
// every Java thread, the safepoint's operation, and the one thread the
// safepoint waits for — the one the VM's own safepoint timeout names.
func TestMemorySafepoint(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := startStall(t, []string{"-XX:-UseCountedLoopSafepoints", "-XX:+SafepointTimeout", "-XX:SafepointTimeoutDelay=1000"}, "safepoint")
	// The VM's own word for who holds the safepoint up:
	//   # "spinner-1" #12 daemon prio=5 … nid=0x4792 runnable  [0x0000000000000000]
	tg.WaitLine(t, "[", 60*time.Second) // the first line of the timeout's report
	var laggard JavaThread
	for laggard.TID == 0 {
		l := tg.WaitLine(t, "[", 30*time.Second)
		_, rest, ok := strings.Cut(l, "# ")
		if !ok {
			continue
		}
		if h, ok := parseThreadHeader(rest); ok {
			laggard = h
		}
	}
	if _, ok := jstack(t, tg.Pid, 5*time.Second); ok {
		t.Fatal("jstack answered a JVM held at a safepoint")
	}
	mem := readMemory(t, tg.Pid, nil)
	sp := mem.Safepoint
	if sp == nil || sp.State != Synchronizing || sp.Operation != "G1CollectFull" {
		t.Fatalf("safepoint %+v, want synchronizing for G1CollectFull", sp)
	}
	var laggards, names []string
	for _, th := range mem.Threads {
		names = append(names, th.Name)
		if th.Laggard {
			laggards = append(laggards, th.Name)
			if th.TID != laggard.TID || th.VMState != StateInJava {
				t.Errorf("laggard %q tid %d %s; the VM names %q tid %d", th.Name, th.TID, th.VMState, laggard.Name, laggard.TID)
			}
		}
	}
	if !slices.Equal(laggards, []string{laggard.Name}) || laggard.Name != "spinner-1" {
		t.Errorf("memory's laggards %q, the VM's %q", laggards, laggard.Name)
	}
	for _, want := range []string{"main", "gc-1", "spinner-1", "Finalizer", "Signal Dispatcher"} {
		if !slices.Contains(names, want) {
			t.Errorf("thread %q not read (read %q)", want, names)
		}
	}
	for _, th := range mem.Threads {
		if th.Name == "gc-1" && (len(th.Frames) == 0 || th.Frames[0].Method.String() != "java.lang.Runtime.gc") {
			t.Errorf("gc-1's frames (it asked for the GC):\n%s", stackText(th.Frames))
		}
	}
}

// TestCodeCacheMatchesPerfMap: the code cache read from memory names the
// code the VM's own perf map names (jcmd Compiler.perfmap), at the same
// addresses, with the same names.
func TestCodeCacheMatchesPerfMap(t *testing.T) {
	testutil.RequirePtrace(t)
	jcmd := testutil.RequireTool(t, "jcmd")
	// Compiling in the background, the VM drops queued compilations that
	// went stale while its compiler waited for a CPU: a loaded host gave
	// 74 compiled methods where an idle one gives over a hundred. A
	// thread that waits for its compilation loses none.
	tg := startStall(t, []string{"-XX:-BackgroundCompilation"}, "deadlock")
	mapFile := filepath.Join("/tmp", "perf-"+strconv.Itoa(tg.Pid)+".map") // the JVM's java.io.tmpdir, whatever $TMPDIR says
	t.Cleanup(func() { os.Remove(mapFile) })
	// The VM compiles as it gets the CPU: a loaded host takes longer to
	// give it the hundred compiled methods compared below.
	var text []byte
	if err := testutil.Eventually(60*time.Second, func() bool {
		if out, err := exec.Command(jcmd, strconv.Itoa(tg.Pid), "Compiler.perfmap").CombinedOutput(); err != nil {
			t.Fatalf("jcmd Compiler.perfmap: %v\n%s", err, out)
		}
		var err error
		if text, err = os.ReadFile(mapFile); err != nil {
			t.Fatal(err)
		}
		return perfMapMethods(text) >= 100
	}); err != nil {
		t.Fatalf("the VM's perf map names %d compiled methods after a minute, want 100", perfMapMethods(text))
	}
	mem, syms := openLive(t, tg.Pid)
	l, err := ReadLayout(NewReader(mem, Limits{}), syms)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := NewVM(NewReader(mem, Limits{}), syms, l)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := vm.CodeCache()
	if err != nil || cc.Err != nil || cc.Skipped > 0 {
		t.Fatalf("code cache: %v, %v, %d skipped", err, cc.Err, cc.Skipped)
	}
	ours := map[[2]uint64]string{}
	for _, b := range cc.Blobs {
		ours[[2]uint64{b.Start, b.End - b.Start}] = b.Name
	}
	// The lookups the frame walker makes (through the segment maps) find
	// the blobs the walk of every block found.
	ix, err := vm.codeIndex()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range cc.Blobs {
		if b.End == b.Start {
			continue
		}
		for _, pc := range []uint64{b.Start, (b.Start + b.End) / 2, b.End - 1} {
			if got, ok := ix.Lookup(pc); !ok || got.Start != b.Start || got.Name != b.Name {
				t.Errorf("pc %#x of %s [%#x, %#x): looked up %+v", pc, b.Name, b.Start, b.End, got)
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	var missing []string
	methods := 0
	for _, ln := range lines {
		f := strings.SplitN(ln, " ", 3)
		start, _ := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
		size, _ := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		name, ok := ours[[2]uint64{start, size}]
		if strings.Contains(f[2], "(") {
			methods++
		}
		if !ok || name != f[2] {
			missing = append(missing, fmt.Sprintf("%s (ours: %q)", ln, name))
		}
	}
	// The VM may free or compile code between its map and our reading.
	if len(missing) > len(lines)/100 || methods < 100 {
		t.Errorf("%d of the perf map's %d entries (%d methods) not read from memory: %q", len(missing), len(lines), methods, missing)
	}
}

// TestMemoryAcrossEntryFrames: a thread whose Java frames are parted by
// native code that called Java again (reflection's Method.invoke) is read
// whole, as jstack reads it: the runs of Java frames below each entry
// frame follow the anchor its JavaCallWrapper saved.
func TestMemoryAcrossEntryFrames(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := startStall(t, nil, "reflect")
	out, ok := jstack(t, tg.Pid, time.Minute)
	if !ok {
		t.Fatal("jstack did not answer")
	}
	dump := ParseThreadDump(out)
	mem := readMemory(t, tg.Pid, nil)
	sameThreads(t, mem, dump)
	var main *JavaThread
	for i := range mem.Threads {
		if mem.Threads[i].Name == "main" {
			main = &mem.Threads[i]
		}
	}
	if main == nil {
		t.Fatal("no thread main")
	}
	if len(main.Segments) < 2 {
		t.Errorf("the main thread's frames in runs starting at %v, want 2 or more:\n%s", main.Segments, stackText(main.Frames))
	}
}

// perfMapMethods counts the Java methods (names with a signature) of a
// perf map.
func perfMapMethods(text []byte) int {
	n := 0
	for _, ln := range strings.Split(string(text), "\n") {
		if f := strings.SplitN(ln, " ", 3); len(f) == 3 && strings.Contains(f[2], "(") {
			n++
		}
	}
	return n
}
