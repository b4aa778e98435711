package runtimes

// Go is linked into each program: its threads are known by the
// runtime's own functions.
var Go = &Runtime{
	ID:     "go",
	Name:   "Go",
	Frames: []string{"runtime.goexit", "runtime.goexit.abi0", "runtime.mstart", "runtime.mstart.abi0"},
	Pause: &Pause{
		// stopTheWorldWithSema preempts every P and waits on
		// sched.stopnote until each has stopped.
		What:      "stop-the-world",
		Collector: []string{"runtime.stopTheWorldWithSema"},
		Operation: []string{"runtime.gcStart", "runtime.gcMarkTermination", "runtime.stopTheWorldGC", "runtime.forEachP"},
		Waiter:    []string{"runtime.gcstopm", "runtime.semacquire1"},
		NotReached: "runs without being preempted (a loop Go cannot preempt: " +
			"asynchronous preemption off with GODEBUG=asyncpreemptoff=1, or code in a nosplit or runtime-locked section)",
		Advice: "GODEBUG=gctrace=1 prints each GC's stop-the-world times; `go tool trace` shows which goroutine delays the stop",
	},
}
