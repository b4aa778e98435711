package symbolize

import "log/slog"

// Options says what a Process resolves and where it looks.
type Options struct {
	// Kernel resolves kernel addresses through /proc/kallsyms. Without it
	// kernel addresses become "[kernel]" frames.
	Kernel bool
	// JIT reads the target's jitdump and perf-map files (package jit) and
	// names code in anonymous executable memory at each sample's time.
	JIT bool
	// DebugDirs are where separate debug files live, in the target's mount
	// namespace first and then in ours: <dir>/.build-id/xx/yyyy.debug and
	// <dir>/<path of the binary's directory>/<debuglink name>. Nil means
	// {"/usr/lib/debug"}.
	DebugDirs []string
	// Logger receives what a report cannot show (files that could not be
	// opened and why, at debug level). Nil discards.
	Logger *slog.Logger
}

// DefaultDebugDirs is where distributions install debug files.
var DefaultDebugDirs = []string{"/usr/lib/debug"}

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
