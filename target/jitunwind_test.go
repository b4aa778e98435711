package target

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/callframe"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/jit"
)

// pyenv installs CPython 3.12 and 3.13 here on this machine kind.
const (
	python312 = "/root/.pyenv/versions/3.12.1/bin/python3"
	python313 = "/root/.pyenv/versions/3.13.0/bin/python3"
)

// manyFuncs defines and calls enough Python functions that CPython's
// buffered jitdump writer has flushed records with unwinding info, then
// waits.
const manyFuncs = `
import os, sys, time
for i in range(3000):
    exec("def f%d(x):\n    return x + %d\n" % (i, i))
    globals()["f%d" % i](i)
print("ready", os.getpid(), flush=True)
time.sleep(600)
`

// TestCPython313UnwindingInfo: the unwinding info CPython 3.13 writes for
// each of its perf trampolines (CODE_UNWINDING_INFO, -X perf_jit) is
// placed where it describes the trampoline's code: the CFA is rsp+8 at
// entry and rsp+16 once the trampoline has pushed, where its call returns.
func TestCPython313UnwindingInfo(t *testing.T) {
	py := testutil.RequireTool(t, python313)
	cmd := exec.Command(py, "-X", "perf_jit", "-c", manyFuncs)
	cmd.Dir = t.TempDir()
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 60*time.Second)
	tp, err := Open(tg.Pid, Options{JIT: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	ix := tp.jit.Index()
	checked := 0
	for _, src := range tp.jit.Sources() {
		t.Logf("source %s: %d symbols", src.Path, src.Symbols)
	}
	for sym := range ix.All() {
		if _, ok := ix.Unwinding(sym); !ok {
			continue
		}
		cfi, bias, _, ok := tp.jitUn.UnwindInfo(sym.Start+5, 0)
		if !ok || bias != 0 {
			t.Fatalf("%s at %#x: no rules from its unwinding info", sym.Name, sym.Start)
		}
		for _, tc := range []struct{ pc, cfa uint64 }{{sym.Start, 8}, {sym.Start + 5, 16}} {
			row, err := cfi.RowAt(tc.pc)
			if err != nil || row == nil || row.CFAReg != callframe.RegRSP || uint64(row.CFAOff) != tc.cfa {
				t.Fatalf("%s at +%#x: row %+v (%v), want CFA rsp+%d", sym.Name, tc.pc-sym.Start, row, err, tc.cfa)
			}
		}
		if checked++; checked == 100 {
			break
		}
	}
	if checked == 0 {
		t.Fatal("no trampoline with unwinding info in the jitdump")
	}
}

// TestCPython312Trampolines: CPython 3.12's -X perf names its trampolines
// in a perf map only; their rules come from their known bytes, checked
// in the target's memory: CFA rsp+16 where the call returns.
func TestCPython312Trampolines(t *testing.T) {
	py := testutil.RequireTool(t, python312)
	tg := testutil.Start(t, py, "-X", "perf", "-c", manyFuncs)
	tg.WaitLine(t, "ready", 60*time.Second)
	tp, err := Open(tg.Pid, Options{JIT: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	checked := 0
	for sym := range tp.jit.Index().All() {
		cfi, _, _, ok := tp.jitUn.UnwindInfo(sym.Start+5, 0)
		if !ok {
			t.Fatalf("trampoline %s at %#x: no rules", sym.Name, sym.Start)
		}
		if row, err := cfi.RowAt(sym.Start + 5); err != nil || row == nil || row.CFAOff != 16 {
			t.Fatalf("trampoline %s: row %+v (%v), want CFA rsp+16", sym.Name, row, err)
		}
		if checked++; checked == 100 {
			break
		}
	}
	if checked == 0 {
		t.Fatal("the perf map names no trampoline")
	}
	// Code that is not a trampoline gets no rules.
	if _, _, _, ok := tp.jitUn.UnwindInfo(0x1000, 0); ok {
		t.Error("rules for an address that holds no trampoline")
	}
}

// FuzzJITUnwinding: a jitdump's unwinding info comes from the target;
// whatever it holds, it gives rules only for the code it was written for
// (an FDE that starts at the code), never a panic.
func FuzzJITUnwinding(f *testing.F) {
	// CPython 3.13's record for an 11-byte trampoline (.eh_frame part).
	f.Add([]byte("\x14\x00\x00\x00\x00\x00\x00\x00\x01zR\x00\x01x\x10\x01\x1b\x0c\x07\x08\x90\x01\x00\x00\x14\x00\x00\x00\x1c\x00\x00\x00\xd0\xff\xff\xff\x0b\x00\x00\x00\x00D\x0e\x10F\x0e\x08\x00"), uint64(11))
	f.Add(trampolineEhFrame(0x1000, 11, 4, 10), uint64(11))
	f.Fuzz(func(t *testing.T, eh []byte, size uint64) {
		if len(eh) == 0 || size == 0 || size > 1<<20 {
			return
		}
		const start = 0x7f0000001000
		j := &jitUnwind{}
		sym := &jit.Symbol{Start: start, Size: size}
		cfi := j.published(sym, jit.Unwinding{EhFrame: eh})
		if cfi == nil {
			return
		}
		row, err := cfi.RowAt(start)
		if err != nil || row == nil || row.FnStart != start {
			t.Fatalf("rules kept for code they do not start at: %+v %v", row, err)
		}
	})
}

// TestV8UnwindingInfo: the unwinding info V8 writes under
// --perf-prof-unwinding-info (CODE_UNWINDING_INFO records) is placed where
// it describes its code: at the first instruction of fibonacci's
// optimized code the return address is on top of the stack (CFA rsp+8),
// and inside it V8's frame rules apply (CFA based on rbp). Node.js 20's V8
// writes rules for optimized code only; for the rest (builtins, baseline
// code) an empty table, which gives no rules: frame pointers unwind it.
func TestV8UnwindingInfo(t *testing.T) {
	node := testutil.RequireTool(t, "node")
	cmd := exec.Command(node, "--perf-prof", "--perf-prof-unwinding-info", testutil.Testdata(t, "node", "fib.js"))
	cmd.Dir = t.TempDir()
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 30*time.Second)
	tp, err := Open(tg.Pid, Options{JIT: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	// "ready" follows V8's decision to optimize fibonacci; the optimized
	// code's records follow in the jitdump.
	var opt *jit.Symbol
	err = testutil.Eventually(30*time.Second, func() bool {
		if err := tp.Refresh(); err != nil {
			t.Logf("refresh: %v", err)
		}
		for sym := range tp.jit.Index().All() {
			if u, ok := tp.jit.Index().Unwinding(sym); ok && len(u.EhFrame) > 0 && strings.HasPrefix(sym.Name, "JS:*fibonacci") {
				opt = sym
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal("V8 wrote no unwinding info for fibonacci's optimized code")
	}
	cfi, bias, _, ok := tp.jitUn.UnwindInfo(opt.Start, 0)
	if !ok || bias != 0 {
		t.Fatalf("%s at %#x: no rules from its unwinding info", opt.Name, opt.Start)
	}
	row, err := cfi.RowAt(opt.Start)
	if err != nil || row == nil || row.CFAReg != callframe.RegRSP || row.CFAOff != 8 {
		t.Fatalf("%s at its first instruction: row %+v (%v), want CFA rsp+8", opt.Name, row, err)
	}
	framed := false
	for pc := opt.Start; pc < opt.End() && !framed; pc++ {
		row, err := cfi.RowAt(pc)
		framed = err == nil && row != nil && row.CFAReg == callframe.RegRBP && row.CFAOff == 16
	}
	if !framed {
		t.Errorf("%s: no instruction with V8's frame (CFA rbp+16)", opt.Name)
	}
	empty := 0
	for sym := range tp.jit.Index().All() {
		if u, ok := tp.jit.Index().Unwinding(sym); ok && len(u.EhFrame) == 0 {
			if _, _, _, ok := tp.jitUn.UnwindInfo(sym.Start, 0); ok {
				t.Fatalf("%s at %#x: rules from an empty table", sym.Name, sym.Start)
			}
			empty++
		}
	}
	t.Logf("%s: rules placed; %d code objects with an empty table", opt.Name, empty)
}

// TestChangeLog: an answer of generation g holds in a later one where no
// generation since changed its range; a generation that read its code
// again from the start changes everything; generations no longer logged
// hold nothing.
func TestChangeLog(t *testing.T) {
	var c *changeLog
	c = c.then(1, nil, false)
	c = c.then(2, []jit.Range{{Start: 0x1000, End: 0x1100}, {Start: 0x3000, End: 0x3040}}, true)
	c = c.then(3, []jit.Range{{Start: 0x2000, End: 0x2010}}, true)
	for _, tc := range []struct {
		g, cur, lo, hi uint64
		want           bool
	}{
		{3, 3, 0x1000, 0x1001, true},  // the same generation
		{2, 3, 0x1000, 0x1001, true},  // 3 changed only 0x2000-0x2010
		{2, 3, 0x200f, 0x2010, false}, // in 3's range
		{2, 3, 0x1fff, 0x2000, true},  // just below it
		{2, 3, 0x2010, 0x2011, true},  // just above it
		{1, 3, 0x10ff, 0x1100, false}, // in 2's first range
		{1, 3, 0x1100, 0x1101, true},
		{1, 3, 0x2fff, 0x3001, false}, // overlapping 2's second
		{1, 2, 0x2000, 0x2001, true},  // 3 is after the current one
		{0, 3, 0x5000, 0x5001, false}, // 1 read everything again
		{3, 2, 0x5000, 0x5001, false}, // a generation not seen yet
	} {
		if got := c.unchanged(tc.g, tc.cur, tc.lo, tc.hi); got != tc.want {
			t.Errorf("unchanged(%d, %d, %#x, %#x) = %v, want %v", tc.g, tc.cur, tc.lo, tc.hi, got, tc.want)
		}
	}
	for g := uint64(4); g < 4+maxChangeLog; g++ {
		c = c.then(g, nil, true)
	}
	if c.unchanged(2, 3+maxChangeLog, 0x5000, 0x5001) {
		t.Error("an answer of a generation no longer logged holds")
	}
	if len(c.gens) != maxChangeLog {
		t.Errorf("%d generations logged, want %d", len(c.gens), maxChangeLog)
	}
}
