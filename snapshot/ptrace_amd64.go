package snapshot

import (
	"github.com/stallwatch/stallwatch/internal/unwind"
	"golang.org/x/sys/unix"
)

// ptraceSupported: the unwinder and the registers read are x86-64's.
const ptraceSupported = true

func regsOf(r *unix.PtraceRegs) unwind.Regs {
	return unwind.Regs{IP: r.Rip, SP: r.Rsp, BP: r.Rbp, BPKnown: true}
}
