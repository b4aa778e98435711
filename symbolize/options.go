package symbolize

import (
	"log/slog"

	"github.com/stallwatch/stallwatch/jit"
)

// Options says what a Process resolves.
type Options struct {
	// Kernel resolves kernel addresses through /proc/kallsyms. Without it
	// kernel addresses become "[kernel]" frames.
	Kernel bool
	// JIT, when not nil, is the target's jitdump and perf-map files
	// (package jit): code in anonymous executable memory is named at each
	// sample's time from its Index, read again at each Refresh.
	JIT *jit.Process
	// Logger receives what a report cannot show. Nil discards.
	Logger *slog.Logger
}

// Addr is one address to resolve.
type Addr struct {
	PC uint64
	// Time is the CLOCK_MONOTONIC time of the sample, in nanoseconds: it
	// picks the JIT code that was live at that address then. Zero means
	// the latest code.
	Time uint64
	// Kernel marks a kernel address (the first sampler.Sample.Kernel
	// entries of a stack).
	Kernel bool
	// Return marks a return address (every frame but the innermost): the
	// call that pushed it is at PC-1, which is what gets named, so that a
	// call at the end of a function or of an inlined body is not credited
	// to whatever follows it.
	Return bool
}
