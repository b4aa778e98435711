//go:build !amd64

package snapshot

import (
	"github.com/stallwatch/stallwatch/internal/unwind"
	"golang.org/x/sys/unix"
)

// ptraceSupported: user stacks under ptrace are read on x86-64 only; Take
// works without stops elsewhere and says so.
const ptraceSupported = false

func regsOf(*unix.PtraceRegs) unwind.Regs { return unwind.Regs{} }
