package analysis

import (
	"path"
	"strings"

	"github.com/stallwatch/stallwatch/model"
)

// runtimeKind is the language runtime a capture's process runs, as far as
// its executable and mappings tell.
type runtimeKind string

const (
	rtNone   runtimeKind = ""
	rtJVM    runtimeKind = "jvm"
	rtGo     runtimeKind = "go"
	rtNode   runtimeKind = "node"
	rtPython runtimeKind = "python"
	rtDotnet runtimeKind = "dotnet"
	rtJulia  runtimeKind = "julia"
)

// runtimeName is how a sentence names a runtime.
func (r runtimeKind) String() string {
	switch r {
	case rtJVM:
		return "JVM"
	case rtGo:
		return "Go"
	case rtNode:
		return "Node.js"
	case rtPython:
		return "CPython"
	case rtDotnet:
		return ".NET"
	case rtJulia:
		return "Julia"
	}
	return "the runtime"
}

// jitSwitch is how to start a runtime so that its JIT-compiled code gets
// names a profiler outside the process can read.
func (r runtimeKind) jitSwitch() string {
	switch r {
	case rtNode:
		return "start node with --perf-basic-prof (a /tmp/perf-<pid>.map) or --perf-prof (a jitdump); add --interpreted-frames-native-stack to see interpreted functions"
	case rtJVM:
		return "start java with -XX:+PreserveFramePointer (whole Java stacks) and write its JIT names with `jcmd <pid> Compiler.perfmap` (or -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit, or perf's libperf-jvmti.so agent)"
	case rtPython:
		return "run CPython 3.12 or later with -X perf (or PYTHONPERFSUPPORT=1; 3.13: -X perf_jit) so that Python functions appear in native stacks"
	case rtDotnet:
		return "set DOTNET_PerfMapEnabled=1 in the process's environment before it starts"
	case rtJulia:
		return "start julia with ENABLE_JITPROFILING=1 (LLVM writes a jitdump under ~/.debug/jit or $JITDUMPDIR)"
	}
	return ""
}

// detectRuntime names the runtime from the executable's name, then from
// the libraries and functions in the profile.
func detectRuntime(info *model.Info, p *model.Profile, snap *model.Snapshot, a *stackTable) runtimeKind {
	var names []string
	if info.Executable != "" {
		names = append(names, info.Executable)
	}
	if len(info.Command) > 0 {
		names = append(names, info.Command[0])
	}
	if snap != nil && len(snap.Command) > 0 {
		names = append(names, snap.Command[0])
	}
	for _, n := range names {
		if r := runtimeOfFile(n); r != rtNone {
			return r
		}
	}
	var maps []*model.Mapping
	if p != nil {
		maps = p.Mappings
	}
	for _, m := range maps {
		if r := runtimeOfLibrary(m.File); r != rtNone {
			return r
		}
	}
	if snap != nil {
		for _, t := range snap.Threads {
			for _, l := range t.User {
				if l != nil && l.Mapping != nil {
					if r := runtimeOfLibrary(l.Mapping.File); r != rtNone {
						return r
					}
				}
			}
		}
	}
	// A Go program is one executable: its runtime shows in its frames.
	if a != nil {
		for _, fr := range a.stacks {
			for _, f := range fr {
				if f.Name == "runtime.goexit" || f.Name == "runtime.goexit.abi0" || f.Name == "runtime.mstart" || f.Name == "runtime.mstart.abi0" {
					return rtGo
				}
			}
		}
	}
	return rtNone
}

// runtimeOfFile names the runtime an executable is.
func runtimeOfFile(file string) runtimeKind {
	b := path.Base(file)
	switch {
	case b == "java" || b == "javaw":
		return rtJVM
	case b == "node" || b == "nodejs":
		return rtNode
	case b == "python" || strings.HasPrefix(b, "python2") || strings.HasPrefix(b, "python3"):
		return rtPython
	case b == "dotnet":
		return rtDotnet
	case b == "julia":
		return rtJulia
	}
	return rtNone
}

// runtimeOfLibrary names the runtime a shared library belongs to.
func runtimeOfLibrary(file string) runtimeKind {
	b := path.Base(file)
	switch {
	case strings.HasPrefix(b, "libjvm."):
		return rtJVM
	case strings.HasPrefix(b, "libnode."):
		return rtNode
	case strings.HasPrefix(b, "libpython"):
		return rtPython
	case strings.HasPrefix(b, "libcoreclr."):
		return rtDotnet
	case strings.HasPrefix(b, "libjulia"):
		return rtJulia
	}
	return rtNone
}

// pauseSpec describes how a runtime stops its threads for a collection or
// another operation, by the functions its threads are found in: those of
// the thread that stops the others and waits for them to stop (collector),
// those of the work done while they are stopped (operation), and those the
// stopped threads wait in (waiter). The names are the runtimes' own, as
// their sources define them.
type pauseSpec struct {
	rt        runtimeKind
	what      string // "safepoint", "stop-the-world"
	collector []string
	operation []string
	waiter    []string
	// notReached explains a thread that runs on while the others wait.
	notReached string
	advice     string
}

var pauseSpecs = []pauseSpec{
	{
		// HotSpot: the VM Thread arms the safepoint and waits for every
		// Java thread to reach a poll (SafepointSynchronize::begin,
		// synchronize_threads), runs the operation (VM_Operation::evaluate,
		// a GC's VM_G1CollectFull and the like), Java threads park in
		// SafepointSynchronize::block; a thread that asked for the
		// operation (System.gc()) waits in VMThread::execute.
		rt: rtJVM, what: "safepoint",
		collector: []string{"SafepointSynchronize::begin", "SafepointSynchronize::synchronize_threads"},
		operation: []string{"VM_Operation::evaluate", "VMThread::evaluate_operation"},
		waiter: []string{"SafepointSynchronize::block", "SafepointMechanism::process", "VMThread::execute",
			"VMThread::wait_until_executed", "JavaThread::check_safepoint_and_suspend_for_native_trans"},
		notReached: "runs without reaching a safepoint poll (a counted loop without polls, or long native code that holds the VM in a state that must not be interrupted)",
		advice:     "-Xlog:safepoint and -Xlog:gc show each pause and the operation; frequent full GCs (System.gc(), a heap too small for the live data) are the usual cause; -XX:+DisableExplicitGC ignores System.gc()",
	},
	{
		// Go: stopTheWorldWithSema preempts every P and waits on
		// sched.stopnote until each has stopped.
		rt: rtGo, what: "stop-the-world",
		collector: []string{"runtime.stopTheWorldWithSema"},
		operation: []string{"runtime.gcStart", "runtime.gcMarkTermination", "runtime.stopTheWorldGC", "runtime.forEachP"},
		waiter:    []string{"runtime.gcstopm", "runtime.semacquire1"},
		notReached: "runs without being preempted (a loop Go cannot preempt: " +
			"asynchronous preemption off with GODEBUG=asyncpreemptoff=1, or code in a nosplit or runtime-locked section)",
		advice: "GODEBUG=gctrace=1 prints each GC's stop-the-world times; `go tool trace` shows which goroutine delays the stop",
	},
	{
		// CoreCLR: the thread that suspends the runtime waits in
		// ThreadSuspend::SuspendRuntime/SuspendEE for every managed
		// thread to reach a safe point; threads that return to managed
		// code during the GC wait in Thread::RareDisablePreemptiveGC and
		// WaitUntilGCComplete.
		rt: rtDotnet, what: "suspension",
		collector:  []string{"ThreadSuspend::SuspendRuntime", "ThreadSuspend::SuspendEE", "ThreadSuspend::SuspendAllThreads"},
		operation:  []string{"GCHeap::GarbageCollect", "gc_heap::garbage_collect"},
		waiter:     []string{"Thread::RareDisablePreemptiveGC", "WaitUntilGCComplete", "Thread::WaitSuspendEvents"},
		notReached: "runs managed code that does not reach a GC safe point (a tight loop the JIT emitted without GC polls)",
		advice:     "dotnet-counters (time in GC, GC count) and dotnet-trace's GC events show each suspension; DOTNET_gcServer and fewer allocations shorten them",
	},
	{
		// Julia (JuliaLang/julia's src/safepoint.c, and src/gc-stock.c,
		// formerly src/gc.c): the thread that collects, in jl_gc_collect
		// → _jl_gc_collect, wins jl_safepoint_start_gc and waits for
		// every other thread to set its ptls->gc_state in
		// jl_gc_wait_for_the_world (in older releases a static function
		// of gc.c spinning in jl_cpu_pause, which the compiler may inline
		// into _jl_gc_collect; in current sources a function of
		// safepoint.c sleeping on safepoint_cond_begin), then marks
		// (gc_mark_loop, or its _serial and _parallel variants where
		// marking is parallel). The others, at a safepoint,
		// wait for it to end in jl_safepoint_wait_gc, on
		// safepoint_cond_end: from jl_set_gc_and_wait (the safepoint
		// page's fault handler) or from jl_safepoint_start_gc when
		// another thread won the collection. A thread in
		// jl_safepoint_wait_thread_resume waits for a suspension
		// (jl_safepoint_suspend_thread) to end, not for a GC: it is not
		// one of these.
		rt: rtJulia, what: "GC safepoint",
		collector:  []string{"jl_gc_wait_for_the_world", "jl_safepoint_start_gc"},
		operation:  []string{"_jl_gc_collect", "jl_gc_collect", "gc_mark_loop"},
		waiter:     []string{"jl_safepoint_wait_gc", "jl_set_gc_and_wait"},
		notReached: "runs without reaching a safepoint (Julia polls for one when it allocates and at GC.safepoint(), not on each iteration of a loop: a loop that does not allocate holds every other thread; so does a long ccall not marked GC-safe)",
		advice:     "GC.enable_logging(true) prints each collection; put GC.safepoint() in long loops that do not allocate, and mark long ccalls `@threadcall` or gc-safe",
	},
}
