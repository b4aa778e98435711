package runtimes

import "github.com/stallwatch/stallwatch/model"

// Reader reads a runtime's own state from the memory of a process it
// runs in, with nothing asked of the target (no flag at its start, no code
// run in it): the place where a runtime's memory reader plugs into its
// descriptor. Readers are pure: they read through Memory and the images'
// Symbols, which the collectors give them (package target), bound every
// read, and take what they read for untrusted input.
type Reader interface {
	// Threads reads each thread's frames of the runtime's own code (its
	// functions, files and lines, innermost first), by native thread id.
	Threads(mem Memory, images []Image) (map[int][]model.Line, error)
}

// Memory reads the target's memory; a read that gets fewer than len(p)
// bytes returns an error. The readers of runtimes/cpython, runtimes/hotspot
// and runtimes/v8 declare this method set, and internal/addrspace's
// Memory has it.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Symbols looks up a symbol an image defines, by name: its run-time
// address and size; ok is false when the image does not define it.
type Symbols interface {
	Symbol(name string) (addr, size uint64, ok bool)
}

// Image is one object file of the target as a reader sees it.
type Image struct {
	Path    string // in the target's mount namespace
	Symbols Symbols
}
