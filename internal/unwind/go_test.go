package unwind

import (
	"debug/elf"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestGoStacks: Go code has no .eh_frame; its binary's pclntab gives every
// frame's size. A Go thread blocked in read(2) unwinds exactly — the frames
// gdb finds, ending at runtime.goexit and not in the stale memory above it —
// both from ptrace registers and without a stop (stack pointer only).
func TestGoStacks(t *testing.T) {
	testutil.RequirePtrace(t)
	bin := testutil.BuildGo(t, "goblocked")
	tg := testutil.Start(t, bin)
	tid, _ := strconv.Atoi(strings.TrimPrefix(tg.WaitLine(t, "ready ", 10*time.Second), "ready "))
	if err := testutil.Eventually(10*time.Second, func() bool {
		sc, err := procfs.ReadSyscall(tg.Pid, tid)
		return err == nil && sc.Nr == 0
	}); err != nil {
		t.Fatal("reader never blocked in read")
	}
	p, space := openProcess(t, tg.Pid)
	syms := goSymbols(t, bin)
	want := []string{"main.blockInRead", "main.reader", "runtime.goexit.abi0"}
	gdb := gdbStacks(t, tg.Pid)[tid]
	for len(gdb) > 0 && gdb[len(gdb)-1].pc == 0 {
		gdb = gdb[:len(gdb)-1] // gdb's "?? ()" past goexit: the end
	}
	if len(gdb) == 0 {
		t.Fatalf("gdb found no stack for thread %d", tid)
	}

	blocked, err := p.BlockedTrace(tid, MaxFrames)
	if err != nil {
		t.Fatal(err)
	}
	st := ptraceStop(t, tg.Pid, tid)
	regs := p.UnwindTrace(st.regs, Fallback(DumpMemory(st.regs.SP, st.dump), space.Memory()), MaxFrames)
	for name, tr := range map[string]Trace{"no stop": blocked, "registers": regs} {
		names := syms.names(tr.PCs)
		if !inOrder(names, want) {
			t.Errorf("%s (%s, end %v): %v, want %v in order", name, tr.Methods(), tr.Cut, names, want)
		}
		if len(tr.PCs) != len(gdb) || tr.Cut.Truncated() {
			t.Errorf("%s: %d frames ending %v, gdb has %d:\n ours %v\n  gdb %s", name, len(tr.PCs), tr.Cut, len(gdb), names, gdbList(gdb))
		}
		matchGdb(t, name, tr.PCs, gdb)
		if m := tr.Methods(); m != "gopclntab" {
			t.Errorf("%s: the Go stack was unwound by %s, want gopclntab", name, m)
		}
	}
}

type symTable []elf.Symbol

func goSymbols(t *testing.T, path string) symTable {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var out symTable
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// names resolves pcs in a non-PIE Go binary (link-time addresses).
func (st symTable) names(pcs []uint64) []string {
	var out []string
	for i, pc := range pcs {
		if i > 0 {
			pc--
		}
		j := sort.Search(len(st), func(j int) bool { return st[j].Value > pc }) - 1
		if j >= 0 && pc < st[j].Value+st[j].Size {
			out = append(out, st[j].Name)
		} else {
			out = append(out, "?")
		}
	}
	return out
}

func inOrder(names, want []string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && n == want[i] {
			i++
		}
	}
	return i == len(want)
}
