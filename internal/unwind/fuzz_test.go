package unwind

import (
	"encoding/binary"
	"os"
	"sync"
	"testing"

	"github.com/stallwatch/stallwatch/internal/addrspace"
)

var (
	ownOnce  sync.Once
	ownProc  *Process
	ownSpace *addrspace.Space
)

// own is the unwinder of this test process: real code, real CFI (the test
// binary's Go code and libc's).
func own(t testing.TB) *Process {
	ownOnce.Do(func() {
		s, err := addrspace.Open(os.Getpid(), addrspace.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ownSpace, ownProc = s, NewProcess(s)
	})
	return ownProc
}

// FuzzUnwindSample: a sample's registers and stack copy come from the
// target; whatever they hold, the walk ends (within its frame limit),
// and every frame after the first is a return address in executable code:
// nothing is made of stack bytes that do not look like a call's return.
func FuzzUnwindSample(f *testing.F) {
	p := own(f)
	var code uint64
	for _, m := range ownSpace.Modules() {
		if m.Exec() && m.File != nil {
			code = m.Start + 0x40
			break
		}
	}
	stack := make([]byte, 256)
	for i := 0; i+8 <= len(stack); i += 8 {
		binary.LittleEndian.PutUint64(stack[i:], code+uint64(i))
	}
	f.Add(code, uint64(0x7ffe0000), uint64(0x7ffe0010), stack, code+8)
	f.Add(uint64(0), uint64(0), uint64(0), []byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, ip, sp, bp uint64, stack []byte, fp0 uint64) {
		const max = 64
		out, cut := p.UnwindSample(Sample{Regs: Regs{IP: ip, SP: sp, BP: bp, BPKnown: true}, Stack: stack, FP: []uint64{ip, fp0}}, max, nil)
		if len(out) > max {
			t.Fatalf("%d frames, limit %d", len(out), max)
		}
		for i, pc := range out {
			if i > 0 && p.lookup(pc-1) == nil {
				t.Fatalf("frame %d, %#x, is in no executable mapping (cut %v)", i, pc, cut)
			}
		}
	})
}
