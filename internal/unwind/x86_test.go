package unwind

import (
	"encoding/binary"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

func TestCallEndingAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		code  []byte // ends at the return address
		kind  callKind
		rel   int32
		preOK bool // the kind holds whatever precedes the call
	}{
		{"call rel32", []byte{0xe8, 0x10, 0x00, 0x00, 0x00}, directCall, 0x10, false},
		{"call rel32 backwards", []byte{0xe8, 0xf0, 0xff, 0xff, 0xff}, directCall, -16, false},
		{"bnd call rel32", []byte{0x90, 0xf2, 0xe8, 0x00, 0x01, 0x00, 0x00}, directCall, 0x100, false},
		{"call *%rax", []byte{0x90, 0xff, 0xd0}, indirectCall, 0, false},
		{"call *%r12", []byte{0x90, 0x41, 0xff, 0xd4}, indirectCall, 0, false},
		{"notrack call *%rax", []byte{0x90, 0x3e, 0xff, 0xd0}, indirectCall, 0, false},
		{"call *(%rax)", []byte{0x90, 0xff, 0x10}, indirectCall, 0, false},
		{"call *0x20(%rax)", []byte{0x90, 0xff, 0x50, 0x20}, indirectCall, 0, false},
		{"call *0x8(%rsp)", []byte{0x90, 0xff, 0x54, 0x24, 0x08}, indirectCall, 0, false},
		{"call *0x1000(%rbx)", []byte{0x90, 0xff, 0x93, 0x00, 0x10, 0x00, 0x00}, indirectCall, 0, false},
		{"call *0x10(%rip)", []byte{0x90, 0xff, 0x15, 0x10, 0x00, 0x00, 0x00}, indirectCall, 0, false},
		{"call *abs32", []byte{0x90, 0xff, 0x14, 0x25, 0x00, 0x10, 0x40, 0x00}, indirectCall, 0, false},
		{"call *0x18(%r13,%rax,8)", []byte{0x90, 0x41, 0xff, 0x54, 0xc5, 0x18}, indirectCall, 0, false},
		{"nop: no call", []byte{0x90, 0x90, 0x90, 0x90, 0x90}, notCall, 0, false},
		{"jmp rel32: no call", []byte{0x90, 0xe9, 0x10, 0x00, 0x00, 0x00}, notCall, 0, false},
		{"jmp *%rax: no call", []byte{0x90, 0xff, 0xe0}, notCall, 0, false},
		{"after goexit's nop", []byte{0xcc, 0xcc, 0x90}, notCall, 0, false},
		{"too short", []byte{0xd0}, notCall, 0, false},
		{"empty", nil, notCall, 0, false},
		// Bytes that end an indirect call where they start one way and
		// a direct one the other: a call, its target unknown.
		{"either", []byte{0xe8, 0x00, 0x00, 0xff, 0xd0}, eitherCall, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, rel := callEndingAt(tc.code)
			if kind != tc.kind || kind == directCall && rel != tc.rel {
				t.Errorf("callEndingAt(% x) = %v, %#x; want %v, %#x", tc.code, kind, rel, tc.kind, tc.rel)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	const base = 0x1000
	// push %rbp; call +0x10 (to 0x1016); lea 0x100(%rip),%rax; call *%rax;
	// je -0x10; jmp 0x2000; pop %rbp; ret; int3 padding.
	code := []byte{0x55,
		0xe8, 0x10, 0x00, 0x00, 0x00, // 0x1001: call 0x1016
		0x48, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, // 0x1006: lea 0x100(%rip),%rax → 0x110d
		0xe8, 0x00, 0x02, 0x00, 0x00, // 0x100d: call 0x1212
		0x74, 0xf0, // 0x1012: je 0x1004
		0xe9, 0xe5, 0x0f, 0x00, 0x00, // 0x1014: jmp 0x1ffe
		0x5d, 0xc3, 0xcc, 0xcc,
	}
	b := sweep(code, base)
	if !b.complete || b.indirect {
		t.Fatalf("sweep: complete %v, indirect %v", b.complete, b.indirect)
	}
	want := []branch{{0x1016, 0x1006, nil}, {0x1212, 0x1012, []uint64{0x110d}}}
	if len(b.calls) != len(want) {
		t.Fatalf("calls %+v, want %+v", b.calls, want)
	}
	for i, c := range b.calls {
		if c.target != want[i].target || c.ret != want[i].ret || len(c.leas) != len(want[i].leas) || len(c.leas) > 0 && c.leas[0] != want[i].leas[0] {
			t.Errorf("call %d: %+v, want %+v", i, c, want[i])
		}
	}
	if calls, jumps := b.into(0x1ff0, 0x2010); len(calls) != 0 || !jumps {
		t.Errorf("into the jump's target: calls %v, jumps %v", calls, jumps)
	}
	if calls, jumps := b.into(0x1212, 0x1300); len(calls) != 1 || calls[0].ret != 0x1012 || jumps {
		t.Errorf("into the second call's target: calls %v, jumps %v", calls, jumps)
	}
	if b := sweep([]byte{0xff, 0xe0}, base); !b.indirect {
		t.Error("jmp *%rax is not seen as an indirect jump")
	}
	if b := sweep([]byte{0x06, 0x90}, base); b.complete { // push %es: not in 64-bit mode
		t.Error("undecodable code is swept as complete")
	}
}

// FuzzCallEndingAt: whatever the bytes, a call callEndingAt finds is one
// golang.org/x/arch's decoder decodes as a call ending at the same byte,
// from some start, with the same target when direct.
func FuzzCallEndingAt(f *testing.F) {
	f.Add([]byte{0xe8, 0x10, 0x00, 0x00, 0x00})
	f.Add([]byte{0x41, 0xff, 0x54, 0xc5, 0x18})
	f.Add([]byte{0x3e, 0xff, 0x15, 0x10, 0x00, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, rel := callEndingAt(b)
		if kind == notCall {
			return
		}
		if len(b) > maxInsn {
			b = b[len(b)-maxInsn:]
		}
		direct, indirect := false, false
		for start := range b {
			inst, err := x86asm.Decode(b[start:], 64)
			if err != nil || inst.Op != x86asm.CALL || inst.Len != len(b)-start {
				continue
			}
			if r, ok := inst.Args[0].(x86asm.Rel); ok {
				direct = direct || int32(r) == rel || kind == eitherCall
			} else {
				indirect = true
			}
		}
		switch {
		case kind == directCall && !direct, kind == indirectCall && !indirect, kind == eitherCall && !(direct && indirect):
			t.Fatalf("callEndingAt(% x) = %v (rel %#x); the decoder finds direct %v, indirect %v", b, kind, rel, direct, indirect)
		}
	})
}

// FuzzSweep: any bytes sweep within their length, and every branch found
// lies where the code could reach.
func FuzzSweep(f *testing.F) {
	f.Add([]byte{0x55, 0xe8, 0x10, 0x00, 0x00, 0x00, 0xc3}, uint64(0x1000))
	f.Add(binary.LittleEndian.AppendUint32([]byte{0xe9}, 0xfffffff0), uint64(0x7fff0000))
	f.Fuzz(func(t *testing.T, code []byte, base uint64) {
		b := sweep(code, base)
		if len(b.calls)+len(b.jumps) > maxBranches+1 {
			t.Fatalf("%d branches kept, bound %d", len(b.calls)+len(b.jumps), maxBranches)
		}
		for _, c := range b.calls {
			if c.ret <= base || c.ret > base+uint64(len(code)) || len(c.leas) > maxLeas {
				t.Fatalf("call %+v outside code at %#x+%d", c, base, len(code))
			}
		}
	})
}
