package hotspot

import (
	"fmt"
	"time"
)

// Safepoint is the VM's safepoint state. VMStructs does not publish it
// (JDK 17 dropped SafepointSynchronize from the tables); it comes from
// libjvm's own symbol table (.symtab, kept by Debian's and Ubuntu's
// builds, or a debug file), so Known is false where that is stripped.
// The threads' states (Thread.State) tell the rest.
type Safepoint struct {
	Known bool
	State SafepointState
	// Operation is the VM operation the safepoint is for
	// (VM_Operation::_names: "G1CollectFull", "HandshakeAllThreads"),
	// when known.
	Operation string
	// Began is when the latest safepoint began, on CLOCK_MONOTONIC
	// (HotSpot's os::javaTimeNanos), zero when unknown.
	Began time.Duration
	// Count is the number of safepoints the VM began and ended
	// (SafepointSynchronize::_safepoint_counter counts each twice).
	Count uint64
}

// SafepointState is SafepointSynchronize::SynchronizeState.
type SafepointState int

// The values of SafepointSynchronize::SynchronizeState (safepoint.hpp,
// unchanged from JDK 8 to 21).
const (
	NotSynchronized SafepointState = 0 // no safepoint: Java threads run
	Synchronizing   SafepointState = 1 // the VM Thread waits for Java threads to stop
	Synchronized    SafepointState = 2 // every Java thread stopped or safe; the operation runs
)

func (s SafepointState) String() string {
	switch s {
	case NotSynchronized:
		return "not at a safepoint"
	case Synchronizing:
		return "synchronizing"
	case Synchronized:
		return "at a safepoint"
	}
	return fmt.Sprintf("safepoint state %d", int(s))
}

// The C++ names of the statics read, mangled as in libjvm's .symtab.
const (
	symSafepointState   = "_ZN20SafepointSynchronize6_stateE"
	symSafepointCounter = "_ZN20SafepointSynchronize18_safepoint_counterE"
	symTracingType      = "_ZN16SafepointTracing13_current_typeE"
	symTracingBegin     = "_ZN16SafepointTracing29_last_safepoint_begin_time_nsE"
	symVMOpNames        = "_ZN12VM_Operation6_namesE"
)

// maxVMOps bounds VM_Operation::VMOp_Type (JDK 17 has about 80).
const maxVMOps = 512

// Safepoint reads the VM's safepoint state. It is not an error that
// libjvm's symbol table lacks it: Known is then false.
func (vm *VM) Safepoint() (Safepoint, error) {
	var sp Safepoint
	at, _, ok := vm.syms.Symbol(symSafepointState)
	if !ok {
		return sp, nil
	}
	st, err := vm.r.U32(at, "SafepointSynchronize::_state")
	if err != nil {
		return sp, err
	}
	sp.Known, sp.State = true, SafepointState(st)
	if at, _, ok := vm.syms.Symbol(symSafepointCounter); ok {
		c, err := vm.r.U64(at, "SafepointSynchronize::_safepoint_counter")
		if err != nil {
			return sp, err
		}
		sp.Count = c / 2
	}
	if at, _, ok := vm.syms.Symbol(symTracingBegin); ok {
		ns, err := vm.r.U64(at, "SafepointTracing::_last_safepoint_begin_time_ns")
		if err != nil {
			return sp, err
		}
		sp.Began = time.Duration(ns)
	}
	if sp.State == NotSynchronized {
		return sp, nil
	}
	typ, _, okType := vm.syms.Symbol(symTracingType)
	names, _, okNames := vm.syms.Symbol(symVMOpNames)
	if !okType || !okNames {
		return sp, nil
	}
	i, err := vm.r.U32(typ, "SafepointTracing::_current_type")
	if err != nil {
		return sp, err
	}
	if i >= maxVMOps {
		return sp, fmt.Errorf("SafepointTracing::_current_type %d: more than %d operations", i, maxVMOps)
	}
	p, err := vm.r.U64(names+uint64(i)*8, "VM_Operation::_names entry")
	if err != nil {
		return sp, err
	}
	sp.Operation, err = vm.r.CString(p, maxVMName, "VM operation name")
	return sp, err
}

// Laggards are the Java threads a synchronizing safepoint waits for:
// those in Java code, in the VM or between states, which must reach a
// safepoint poll before the VM Thread can run the operation (threads in
// native code or blocked are safe already). Nil unless sp is
// synchronizing.
func Laggards(sp Safepoint, threads []Thread) []Thread {
	if !sp.Known || sp.State != Synchronizing {
		return nil
	}
	var out []Thread
	for _, t := range threads {
		if t.State != StateUnknown && !t.State.SafepointSafe() {
			out = append(out, t)
		}
	}
	return out
}
