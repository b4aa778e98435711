package runtimes

import "strings"

// DotNet is .NET's CoreCLR, whose perf map DOTNET_PerfMapEnabled=1
// writes. .NET is not on the test machine: what follows is from CoreCLR's
// own sources (src/coreclr/vm/threadsuspend.cpp, threads.cpp), tested on
// a stand-in whose functions carry those names
// (testdata/stalls/dotnet_standin.cpp).
var DotNet = &Runtime{
	ID:          "dotnet",
	Name:        ".NET",
	Executables: []string{"dotnet"},
	Libraries:   []string{"libcoreclr."},
	JIT: &JIT{
		Writer:  "dotnet",
		Switch:  "set DOTNET_PerfMapEnabled=1 in the process's environment before it starts",
		Writes:  isDotNet,
		Display: dotnetName,
	},
	Pause: &Pause{
		// The thread that suspends the runtime waits in
		// ThreadSuspend::SuspendRuntime/SuspendEE for every managed
		// thread to reach a safe point; threads that return to managed
		// code during the GC wait in Thread::RareDisablePreemptiveGC and
		// WaitUntilGCComplete.
		What:       "suspension",
		Collector:  []string{"ThreadSuspend::SuspendRuntime", "ThreadSuspend::SuspendEE", "ThreadSuspend::SuspendAllThreads"},
		Operation:  []string{"GCHeap::GarbageCollect", "gc_heap::garbage_collect"},
		Waiter:     []string{"Thread::RareDisablePreemptiveGC", "WaitUntilGCComplete", "Thread::WaitSuspendEvents"},
		NotReached: "runs managed code that does not reach a GC safe point (a tight loop the JIT emitted without GC polls)",
		Advice:     "dotnet-counters (time in GC, GC count) and dotnet-trace's GC events show each suspension; DOTNET_gcServer and fewer allocations shorten them",
	},
}

// isDotNet recognizes "<ret> [<assembly>] <Type>::<Method>(<args>)".
func isDotNet(name string) bool {
	i := strings.Index(name, "] ")
	if i < 0 {
		return false
	}
	j := strings.LastIndexByte(name[:i], '[')
	rest := name[i:]
	return j >= 0 && (j == 0 || name[j-1] == ' ') && strings.Contains(rest, "::") && strings.Contains(rest, "(")
}

// dotnetName reads "[instance] <ret> [<assembly>] <Type>::<Method>(<args>)[<tier>]".
func dotnetName(raw string) (Name, bool) {
	s := raw
	if i := strings.LastIndexByte(s, '['); i > 0 && strings.HasSuffix(s, "]") && s[i-1] == ')' {
		s = s[:i] // tier: [OptimizedTier1], [PreJIT], ...
	}
	i := strings.Index(s, "] ")
	if i < 0 || !strings.Contains(s[:i], "[") {
		return Name{}, false
	}
	return Name{Name: s[i+2:]}, true
}
