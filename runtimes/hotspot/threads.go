package hotspot

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Thread is one Java thread as the VM's memory holds it.
type Thread struct {
	Addr uint64 // the JavaThread
	TID  int    // the kernel's thread id (OSThread::_thread_id)

	// From its java.lang.Thread object.
	Name     string
	JavaID   int64 // Thread.getId(): jstack's "#14"
	Daemon   bool
	Priority int
	Status   Status

	// State is where the VM says the thread runs: in Java code, in the
	// VM, in native code or blocked (JavaThreadState).
	State VMState

	// Pending is the monitor the thread waits to enter (synchronized),
	// Waiting the one it waits on (Object.wait); Blocker is the object
	// it parks for (LockSupport.park(blocker): a ReentrantLock's sync).
	Pending, Waiting *Monitor
	Blocker          *Object

	// Err says what of this thread could not be read.
	Err error

	stackLo, stackHi uint64 // [lo, hi) of its stack
	threadObj        uint64
}

// Object is a Java object: its address (as jstack prints it) and class.
type Object struct {
	Addr  uint64
	Class string // "java.lang.Object", "java.util.concurrent.locks.ReentrantLock$NonfairSync"
	// Owner is the thread that holds it, for a lock: the owner of an
	// ObjectMonitor, the exclusiveOwnerThread of an
	// AbstractOwnableSynchronizer. Zero when free or unknown.
	Owner uint64 // a JavaThread
}

// Monitor is an inflated monitor (ObjectMonitor) and its object.
type Monitor struct {
	Addr uint64
	Object
}

// VMState is a JavaThreadState: where the thread runs as the VM sees it.
type VMState int

// The states, by what they mean to a safepoint: a thread in Java code or
// in the VM must come to a poll before the safepoint begins; one in
// native code or blocked is already safe.
const (
	StateUnknown VMState = iota
	StateInJava
	StateInVM
	StateInNative
	StateBlocked
	StateTransition // between two of the above
)

func (s VMState) String() string {
	switch s {
	case StateInJava:
		return "in Java"
	case StateInVM:
		return "in VM"
	case StateInNative:
		return "in native"
	case StateBlocked:
		return "blocked"
	case StateTransition:
		return "in transition"
	}
	return "unknown"
}

// SafepointSafe says whether a safepoint can proceed without this thread
// coming to a poll.
func (s VMState) SafepointSafe() bool { return s == StateInNative || s == StateBlocked }

// Status is a Java thread's java.lang.Thread.State with jstack's detail.
type Status string

// The statuses jstack prints.
const (
	StatusNew              Status = "NEW"
	StatusRunnable         Status = "RUNNABLE"
	StatusSleeping         Status = "TIMED_WAITING (sleeping)"
	StatusWaitingMonitor   Status = "WAITING (on object monitor)"
	StatusTimedWaitMonitor Status = "TIMED_WAITING (on object monitor)"
	StatusParked           Status = "WAITING (parking)"
	StatusTimedParked      Status = "TIMED_WAITING (parking)"
	StatusBlockedOnMonitor Status = "BLOCKED (on object monitor)"
	StatusTerminated       Status = "TERMINATED"
	StatusUnknown          Status = ""
)

var statusByName = map[string]Status{
	"NEW": StatusNew, "RUNNABLE": StatusRunnable, "SLEEPING": StatusSleeping,
	"IN_OBJECT_WAIT": StatusWaitingMonitor, "IN_OBJECT_WAIT_TIMED": StatusTimedWaitMonitor,
	"PARKED": StatusParked, "PARKED_TIMED": StatusTimedParked,
	"BLOCKED_ON_MONITOR_ENTER": StatusBlockedOnMonitor, "TERMINATED": StatusTerminated,
}

// State is the java.lang.Thread.State alone ("BLOCKED").
func (s Status) State() string {
	for i, c := range s {
		if c == ' ' {
			return string(s[:i])
		}
	}
	return string(s)
}

// maxThreads bounds the thread list (a JVM with more threads than this
// is read up to it, and the error says so).
const maxThreads = 1 << 16

// ErrTooMany is wrapped when a list is longer than a reader's bound.
var ErrTooMany = errors.New("longer than the reader's bound")

// Threads reads every Java thread the VM lists (ThreadsSMRSupport's
// current ThreadsList). A thread whose details cannot be read is kept
// with its Err; an error is returned only when the list itself cannot be.
func (vm *VM) Threads() ([]Thread, error) {
	o := &vm.o
	list, err := vm.r.U64(o.threadsList, "ThreadsSMRSupport::_java_thread_list")
	if err != nil {
		return nil, err
	}
	n, err := vm.r.U32(list+o.listLength, "ThreadsList::_length")
	if err != nil {
		return nil, err
	}
	var tooMany error
	if n > maxThreads {
		tooMany = fmt.Errorf("ThreadsList of %d threads: %w (%d)", n, ErrTooMany, maxThreads)
		n = maxThreads
	}
	arr, err := vm.r.U64(list+o.listThreads, "ThreadsList::_threads")
	if err != nil {
		return nil, err
	}
	threads := make([]Thread, 0, min(n, 4096))
	for i := range uint64(n) {
		jt, err := vm.r.U64(arr+i*8, "ThreadsList::_threads entry")
		if err != nil {
			return threads, err
		}
		threads = append(threads, vm.thread(jt))
		if vm.r.Exhausted() {
			return threads, fmt.Errorf("ThreadsList: %d of %d threads read: %w", len(threads), n, ErrBudget)
		}
	}
	vm.resolveOwners(threads)
	return threads, tooMany
}

// thread reads one JavaThread.
func (vm *VM) thread(jt uint64) Thread {
	t := Thread{Addr: jt}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	o := &vm.o
	if ost, err := vm.r.U64(jt+o.osThread, "JavaThread::_osthread"); err != nil {
		keep(err)
	} else if tid, err := vm.r.U32(ost+o.osThreadID, "OSThread::_thread_id"); err != nil {
		keep(err)
	} else {
		t.TID = int(int32(tid))
	}
	if st, err := vm.r.U32(jt+o.threadState, "JavaThread::_thread_state"); err != nil {
		keep(err)
	} else {
		t.State = vm.vmState(int64(st))
	}
	if base, err := vm.r.U64(jt+o.stackBase, "JavaThread::_stack_base"); err != nil {
		keep(err)
	} else if size, err := vm.r.U64(jt+o.stackSize, "JavaThread::_stack_size"); err != nil {
		keep(err)
	} else if size <= base {
		t.stackLo, t.stackHi = base-size, base
	}
	keep(vm.readThreadObject(&t))
	var err error
	t.Pending, err = vm.monitorAt(jt+o.pendingMonitor, "JavaThread::_current_pending_monitor")
	keep(err)
	t.Waiting, err = vm.monitorAt(jt+o.waitingMonitor, "JavaThread::_current_waiting_monitor")
	keep(err)
	t.Err = errors.Join(errs...)
	return t
}

// vmState maps a JavaThreadState value by the VM's own constants.
func (vm *VM) vmState(v int64) VMState {
	o := &vm.o
	switch v {
	case o.stateInJava:
		return StateInJava
	case o.stateInVM:
		return StateInVM
	case o.stateInNative:
		return StateInNative
	case o.stateBlocked:
		return StateBlocked
	case o.stateInJava + 1, o.stateInVM + 1, o.stateInNative + 1, o.stateBlocked + 1:
		return StateTransition // the _trans states follow each state
	}
	return StateUnknown
}

// readThreadObject reads what the java.lang.Thread of t says: its name,
// id, priority, daemon flag, status and park blocker. Since JDK 19 the
// status, priority and daemon flag live in the Thread's FieldHolder.
func (vm *VM) readThreadObject(t *Thread) error {
	obj, err := vm.threadOop(t.Addr)
	if err != nil || obj == 0 {
		return err // 0: attaching, no Thread object yet
	}
	t.threadObj = obj
	name, err := vm.objectField(obj, "name")
	if err != nil {
		return err
	}
	if t.Name, err = vm.javaString(name); err != nil {
		return err
	}
	if t.JavaID, err = vm.longField(obj, "tid"); err != nil {
		return err
	}
	holder := obj
	if h, err := vm.objectField(obj, "holder"); err == nil && h != 0 {
		holder = h
	} else if err != nil && !errors.Is(err, ErrNoField) {
		return err
	}
	prio, err := vm.intField(holder, "priority")
	if err != nil {
		return err
	}
	t.Priority = int(prio)
	daemon, err := vm.byteField(holder, "daemon")
	if err != nil {
		return err
	}
	t.Daemon = daemon != 0
	status, err := vm.intField(holder, "threadStatus")
	if err != nil {
		return err
	}
	t.Status = statusByName[vm.o.statusValues[int64(status)]]
	blocker, err := vm.objectField(obj, "parkBlocker")
	if err != nil || blocker == 0 {
		return err
	}
	t.Blocker, err = vm.object(blocker)
	return err
}

// threadOop reads a JavaThread's java.lang.Thread: through an OopHandle
// (JDK 16 and later), or the oop itself where VMStructs types the field
// so (before).
func (vm *VM) threadOop(jt uint64) (uint64, error) {
	if vm.l.Fields["JavaThread::_threadObj"].Type == "oop" {
		return vm.r.U64(jt+vm.o.threadObj, "JavaThread::_threadObj")
	}
	h, err := vm.r.U64(jt+vm.o.threadObj+vm.o.oopHandleObj, "JavaThread::_threadObj")
	if err != nil || h == 0 {
		return 0, err
	}
	return vm.r.U64(h, "JavaThread::_threadObj handle")
}

// object reads an object's class, and, for an ownable synchronizer
// (java.util.concurrent's locks), the thread that holds it.
func (vm *VM) object(addr uint64) (*Object, error) {
	k, err := vm.klassOf(addr)
	if err != nil {
		return nil, err
	}
	cn, err := vm.className(k)
	if err != nil {
		return nil, err
	}
	ob := &Object{Addr: addr, Class: externalClass(cn)}
	owner, err := vm.objectField(addr, "exclusiveOwnerThread")
	switch {
	case errors.Is(err, ErrNoField):
		return ob, nil // not an AbstractOwnableSynchronizer
	case err != nil:
		return ob, err
	case owner == 0:
		return ob, nil
	}
	// java.lang.Thread.eetop is the JavaThread the object stands for.
	eetop, err := vm.longField(owner, "eetop")
	ob.Owner = uint64(eetop)
	return ob, err
}

// monitorAt reads the ObjectMonitor whose pointer is at addr, nil when
// there is none.
func (vm *VM) monitorAt(addr uint64, what string) (*Monitor, error) {
	m, err := vm.r.U64(addr, what)
	if err != nil || m == 0 {
		return nil, err
	}
	mon := &Monitor{Addr: m}
	owner, err := vm.r.U64(m+vm.o.monOwner, "ObjectMonitor::_owner")
	if err != nil {
		return mon, err
	}
	mon.Owner = owner // a JavaThread, or a BasicLock on its stack: see resolveOwners
	h, err := vm.r.U64(m+vm.o.monObject, "ObjectMonitor::_object")
	if err != nil || h == 0 {
		return mon, err
	}
	obj, err := vm.r.U64(h, "ObjectMonitor::_object handle")
	if err != nil || obj == 0 {
		return mon, err
	}
	ob, err := vm.object(obj)
	if ob != nil {
		mon.Object.Addr, mon.Class = ob.Addr, ob.Class
	}
	return mon, err
}

// resolveOwners turns each monitor's owner into the JavaThread that holds
// it: a monitor inflated from a stack lock names the BasicLock on its
// owner's stack, not the owner (HotSpot's own
// Threads::owning_thread_from_monitor_owner does the same), and an
// owner that is no listed thread is unknown (zero).
func (vm *VM) resolveOwners(ts []Thread) {
	byAddr := make(map[uint64]bool, len(ts))
	stacks := make([]*Thread, 0, len(ts))
	for i := range ts {
		byAddr[ts[i].Addr] = true
		if ts[i].stackHi > ts[i].stackLo {
			stacks = append(stacks, &ts[i])
		}
	}
	slices.SortFunc(stacks, func(a, b *Thread) int { return cmp.Compare(a.stackLo, b.stackLo) })
	owner := func(v uint64) uint64 {
		if v == 0 || byAddr[v] {
			return v
		}
		// The last stack starting at or below v, if v is inside it.
		i, _ := slices.BinarySearchFunc(stacks, v, func(t *Thread, v uint64) int { return cmp.Compare(t.stackLo, v+1) })
		if i > 0 && v < stacks[i-1].stackHi {
			return stacks[i-1].Addr
		}
		return 0
	}
	for i := range ts {
		for _, m := range []*Monitor{ts[i].Pending, ts[i].Waiting} {
			if m != nil {
				m.Owner = owner(m.Owner)
			}
		}
		if b := ts[i].Blocker; b != nil {
			b.Owner = owner(b.Owner)
		}
	}
}

// externalClass turns an internal class name into the Java one, as
// Klass::external_name does: "java/lang/Object" → "java.lang.Object",
// and a hidden class's "Stall$$Lambda$1+0x0000000800c01000" →
// "Stall$$Lambda$1/0x0000000800c01000".
func externalClass(internal string) string {
	b := []byte(internal)
	for i, c := range b {
		if c == '/' {
			b[i] = '.'
		}
	}
	if i := strings.LastIndex(internal, "+0x"); i > 0 {
		b[i] = '/'
	}
	return string(b)
}
