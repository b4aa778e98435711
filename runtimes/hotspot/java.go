package hotspot

import (
	"fmt"
)

// Java is what one reading learnt of a JVM's Java threads, by either
// path: the VM's own thread dump (Thread.print through the attach
// mechanism, ParseThreadDump) or its memory (VM.ReadJava).
type Java struct {
	Source  Source
	VM      string // "OpenJDK 64-Bit Server VM (17.0.15+6 mixed mode, sharing)", when known
	Threads []JavaThread
	// Deadlocks are the cycles of Java threads each waiting for a lock
	// the next one holds, as the VM reports them ("Found one Java-level
	// deadlock") or as the waits read from memory make them.
	Deadlocks []Deadlock
	// Safepoint is the VM's safepoint state (memory only).
	Safepoint *Safepoint
	// Code is the range of the VM's code cache, [low, high): a native
	// frame there runs Java code (interpreted, compiled) or one of the
	// VM's stubs. Memory only.
	Code [2]uint64
	// Problems are what could not be read: threads, stacks, lines (at
	// most maxProblems, then a count of the rest).
	Problems []string
	dropped  int
}

// problem keeps a problem, within the bound.
func (j *Java) problem(s string) {
	if len(j.Problems) >= maxProblems {
		j.dropped++
		return
	}
	j.Problems = append(j.Problems, s)
}

// closeProblems says how many problems were not kept.
func (j *Java) closeProblems() {
	if j.dropped > 0 {
		j.Problems = append(j.Problems, fmt.Sprintf("and %d more", j.dropped))
		j.dropped = 0
	}
}

// Source says which path gave a Java reading.
type Source int

const (
	FromThreadDump Source = iota + 1 // jcmd Thread.print -l, through the attach mechanism
	FromMemory                       // the VM's memory, through VMStructs
)

func (s Source) String() string {
	switch s {
	case FromThreadDump:
		return "the JVM's thread dump (Thread.print through the attach mechanism)"
	case FromMemory:
		return "the JVM's memory (VMStructs)"
	}
	return "no source"
}

// JavaThread is one Java thread.
type JavaThread struct {
	TID      int // the kernel's thread id (jstack's nid)
	Name     string
	JavaID   int64 // jstack's "#14"; 0 for the VM's own threads
	Daemon   bool
	Priority int
	Status   Status
	VMState  VMState // memory only
	Frames   []Frame // innermost first
	// Segments are where each run of Frames begins (Stack.Segments):
	// nil when the reading does not tell (a thread dump).
	Segments []int
	// Cut says why Frames stop before the thread's first Java frame.
	Cut string
	// WaitsFor is the lock the thread waits to take (synchronized) or
	// parks for (a java.util.concurrent lock), with its holder.
	WaitsFor *Lock
	// Holds are the ownable synchronizers it holds (Thread.print -l's
	// "Locked ownable synchronizers").
	Holds []Object
	// Laggard marks a thread a synchronizing safepoint waits for.
	Laggard bool
}

// Lock is a lock a thread waits for.
type Lock struct {
	Kind    LockKind
	Object  Object
	Monitor uint64 // the ObjectMonitor, for a monitor, when known
	// Holder is the thread holding it: its tid (0 when unknown) and name.
	HolderTID  int
	HolderName string
}

// LockKind says which kind of lock.
type LockKind int

const (
	MonitorLock LockKind = iota + 1 // synchronized: an object's monitor
	OwnableLock                     // a java.util.concurrent AbstractOwnableSynchronizer
)

func (k LockKind) String() string {
	switch k {
	case MonitorLock:
		return "monitor"
	case OwnableLock:
		return "ownable synchronizer"
	}
	return "lock"
}

// Deadlock is one cycle: each link's thread waits for its lock, which the
// next link's thread holds; the last one's, the first.
type Deadlock struct {
	Links []DeadlockLink
}

// DeadlockLink is one thread of a deadlock and the lock it waits for.
type DeadlockLink struct {
	TID  int
	Name string
	Lock Lock
}

// Thread returns the thread with the given native tid.
func (j *Java) Thread(tid int) *JavaThread {
	for i := range j.Threads {
		if j.Threads[i].TID == tid {
			return &j.Threads[i]
		}
	}
	return nil
}

// ReadJava reads every Java thread, its frames and the lock it waits for,
// the code cache, the safepoint state and the deadlocks, from memory.
// Each thread's frames start at its frame anchor (a thread out of Java
// code has one), else at its registers in regs (by tid: those of a
// thread running Java code, read under a stop); a thread in Java code
// without them has no frames. What cannot be read of one thread is in
// Problems; an error means nothing could be.
func (vm *VM) ReadJava(regs map[int]Registers) (*Java, error) {
	ts, err := vm.Threads()
	if ts == nil && err != nil {
		return nil, err
	}
	j := &Java{Source: FromMemory}
	if err != nil {
		j.problem(err.Error())
	}
	if sp, err := vm.Safepoint(); err != nil {
		j.problem("safepoint state: " + err.Error())
	} else if sp.Known {
		j.Safepoint = &sp
	}
	if lo, hi, err := vm.codeBounds(); err == nil {
		j.Code = [2]uint64{lo, hi}
	}
	var cc Code
	if ix, err := vm.codeIndex(); err != nil {
		j.problem("code cache: " + err.Error())
		cc = &CodeCache{}
	} else {
		cc = ix
	}
	byAddr := make(map[uint64]*Thread, len(ts))
	for i := range ts {
		byAddr[ts[i].Addr] = &ts[i]
	}
	laggard := map[uint64]bool{}
	if j.Safepoint != nil {
		for _, t := range Laggards(*j.Safepoint, ts) {
			laggard[t.Addr] = true
		}
	}
	exhausted := false
	for i := range ts {
		t := &ts[i]
		jt := JavaThread{TID: t.TID, Name: t.Name, JavaID: t.JavaID, Daemon: t.Daemon, Priority: t.Priority,
			Status: t.Status, VMState: t.State, Laggard: laggard[t.Addr], WaitsFor: waitsFor(t, byAddr)}
		if t.Err != nil {
			j.problem(fmt.Sprintf("thread %q (tid %d): %v", t.Name, t.TID, t.Err))
		}
		if vm.r.Exhausted() {
			// The threads' names and states are still worth having.
			if !exhausted {
				j.problem(fmt.Sprintf("the frames of %d threads not read: %v", len(ts)-i, ErrBudget))
				exhausted = true
			}
			j.Threads = append(j.Threads, jt)
			continue
		}
		var r *Registers
		if rg, ok := regs[t.TID]; ok {
			r = &rg
		}
		st, err := vm.JavaStack(t, cc, r)
		switch {
		case err != nil:
			jt.Cut = err.Error()
		case st.Cut != nil:
			jt.Cut = st.Cut.Error()
		}
		jt.Frames, jt.Segments = st.Frames, st.Segments
		j.Threads = append(j.Threads, jt)
	}
	j.Deadlocks = FindDeadlocks(j.Threads)
	j.closeProblems()
	return j, nil
}

// waitsFor is the lock t waits for: the monitor it waits to enter, or
// the synchronizer it parks for when that has an owner.
func waitsFor(t *Thread, byAddr map[uint64]*Thread) *Lock {
	var l *Lock
	var owner uint64
	switch {
	case t.Pending != nil:
		l = &Lock{Kind: MonitorLock, Object: t.Pending.Object, Monitor: t.Pending.Addr}
		owner = t.Pending.Owner
	case t.Blocker != nil && t.Blocker.Owner != 0 && (t.Status == StatusParked || t.Status == StatusTimedParked):
		l = &Lock{Kind: OwnableLock, Object: *t.Blocker}
		owner = t.Blocker.Owner
	default:
		return nil
	}
	l.Object.Owner = 0 // the holder is said by tid and name
	if h := byAddr[owner]; h != nil {
		l.HolderTID, l.HolderName = h.TID, h.Name
	}
	return l
}

// FindDeadlocks finds the cycles among threads that wait for a lock
// another holds, each once, starting from its lowest tid (HotSpot's own
// ThreadService::find_deadlocks_at_safepoint does the same walk).
func FindDeadlocks(ts []JavaThread) []Deadlock {
	byTID := make(map[int]*JavaThread, len(ts))
	for i := range ts {
		byTID[ts[i].TID] = &ts[i]
	}
	next := func(t *JavaThread) *JavaThread {
		if t.WaitsFor == nil || t.WaitsFor.HolderTID == 0 {
			return nil
		}
		return byTID[t.WaitsFor.HolderTID]
	}
	done := map[int]bool{}
	var out []Deadlock
	for i := range ts {
		start := &ts[i]
		if done[start.TID] {
			continue
		}
		onPath := map[int]int{} // tid → position on this path
		var path []*JavaThread
		for t := start; t != nil && !done[t.TID]; t = next(t) {
			if at, ok := onPath[t.TID]; ok {
				out = append(out, cycleFrom(path[at:]))
				break
			}
			onPath[t.TID] = len(path)
			path = append(path, t)
		}
		for _, t := range path {
			done[t.TID] = true
		}
	}
	return out
}

// cycleFrom makes the deadlock of a cycle, from its lowest tid.
func cycleFrom(cy []*JavaThread) Deadlock {
	low := 0
	for i, t := range cy {
		if t.TID < cy[low].TID {
			low = i
		}
	}
	d := Deadlock{}
	for k := range cy {
		t := cy[(low+k)%len(cy)]
		d.Links = append(d.Links, DeadlockLink{TID: t.TID, Name: t.Name, Lock: *t.WaitsFor})
	}
	return d
}
