package capture

import (
	"encoding/binary"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/arch/x86/x86asm"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/target"
)

// TestCallersProvable records real programs as users run them (native C
// built -O2 without frame pointers, Go, Node.js, the JVM, CPython 3.12 -X
// perf, PostgreSQL's LLVM JIT with and without its GDB JIT interface
// registration), in the default unwinding (and with frame pointers where
// the kernel's chain crosses code without them), and
// checks every caller frame of every sampled stack against its call
// site, with a decoder of its own (golang.org/x/arch's, not the
// unwinder's): the instruction before the return address must be a call,
// and a direct call must call the function of the frame below, or one
// whose code jumps there. One edge that cannot be fails the test.
func TestCallersProvable(t *testing.T) {
	if testing.Short() {
		t.Skip("records seven programs, twice each")
	}
	testutil.RequirePerf(t)
	for _, w := range []struct {
		name  string
		start func(t *testing.T) int
		// fp: also with frame pointers, where the default is not fp
		// and the kernel's chain crosses code without them.
		fp bool
	}{
		{"C -O2 without frame pointers", func(t *testing.T) int { return startNoFP(t).Pid }, true},
		{"Go gofmt", func(t *testing.T) int {
			return startGofmt(func(t *testing.T) string { return goRoot(t, "") + "/bin/gofmt" })(t).Pid
		}, false}, // fp is its default
		{"node", func(t *testing.T) int { return startNode(t).Pid }, true},
		{"JVM", startJVM, false},
		{"CPython 3.12 -X perf", func(t *testing.T) int { return startPython(python312, "-X", "perf")(t).Pid }, false},
		{"PostgreSQL JIT", startPostgresJIT(false), true},
		{"PostgreSQL JIT, jit_debugging_support", startPostgresJIT(true), false},
	} {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel() // a target (a PostgreSQL cluster) of its own
			pid := w.start(t)
			modes := []UnwindMode{UnwindAuto}
			if w.fp {
				modes = append(modes, UnwindFP)
			}
			for _, mode := range modes {
				// NativeOnly: the native stacks as unwound, which are what
				// is checked (a CPython target's Python frames take the
				// place of its evaluation frames otherwise).
				_, p, info, _ := recordCPU(t, pid, time.Second, func(c *Config) { c.Unwind, c.NativeOnly = mode, true })
				checkCallSites(t, fmt.Sprintf("--unwind %s (%s)", mode, info.Settings.Unwind), pid, p)
			}
		})
	}
}

// checkCallSites checks every caller frame of p's samples against its
// call site in the target's code (read now: the target is still running).
func checkCallSites(t *testing.T, what string, pid int, p *profile.Profile) {
	t.Helper()
	tp, err := target.Open(pid, target.Options{JIT: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	o := &callSiteOracle{tp: tp, monoOffset: time.Now().UnixNano() - int64(monotime.Now())}
	checked, skipped, bad := 0, 0, 0
	type verdict struct {
		why string
		ok  bool
	}
	seen := map[[3]uint64]verdict{} // by caller, callee and whether the callee is the sampled pc
	for _, s := range p.Sample {
		frames := userFrames(s)
		var when uint64
		if ns := s.NumLabel["end_timestamp_ns"]; len(ns) > 0 {
			when = uint64(ns[0] - o.monoOffset)
		}
		for i := 1; i < len(frames); i++ {
			callee, caller := frames[i-1], frames[i]
			inside := callee.addr
			if i-1 > 0 {
				inside-- // a return address: its call is in the function
			}
			key := [3]uint64{caller.addr, callee.addr, uint64(min(i-1, 1))}
			v, done := seen[key]
			if !done || o.jitReplaced(inside, when) {
				v.why, v.ok = o.check(caller, callee, inside, when)
				seen[key] = v
			}
			switch why, ok := v.why, v.ok; {
			case ok && why != "":
				skipped++
			case ok:
				checked++
			default:
				bad++
				if bad <= 5 {
					t.Errorf("%s: %s ← %s (%#x) cannot be: %s\n  %s", what, callee.name, caller.name, caller.addr, why, framesText(frames))
				}
			}
		}
	}
	t.Logf("%s: %d caller frames checked against their call sites, %d not checkable (JIT code replaced or freed since, a signal's or the runtime's own frames), %d impossible",
		what, checked, skipped, bad)
	if checked < 100 {
		t.Errorf("%s: only %d caller frames checked", what, checked)
	}
}

// frame is a user frame of a sample: its address and function name.
type frame struct {
	addr uint64
	name string
}

func userFrames(s *profile.Sample) []frame {
	var out []frame
	for _, l := range s.Location {
		if l.Address >= 0xffff800000000000 || l.Mapping != nil && strings.HasPrefix(l.Mapping.File, "[kernel") || len(l.Line) == 0 {
			continue
		}
		name := l.Line[len(l.Line)-1].Function.Name // the outermost of the inlined calls: the function at the address
		if strings.HasPrefix(name, "[truncated") {
			break
		}
		out = append(out, frame{l.Address, name})
	}
	return out
}

func framesText(fs []frame) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%s@%#x", f.name, f.addr)
	}
	return strings.Join(parts, " ← ")
}

// callSiteOracle checks callers against the code of the running target.
type callSiteOracle struct {
	tp         *target.Process
	monoOffset int64 // wall-clock ns minus CLOCK_MONOTONIC ns
}

// check says whether caller can be the caller of callee (inside: an exact
// address in it), at sample time when; ok with a reason means the edge
// was not checked, and why.
func (o *callSiteOracle) check(caller, callee frame, inside, when uint64) (why string, ok bool) {
	switch {
	case callee.name == "runtime.asyncPreempt", o.inSigreturn(callee.addr):
		return "the caller is the instruction a signal interrupted", true
	case caller.name == "runtime.goexit":
		return "runtime.goexit's planted return address follows a NOP", true
	case o.sigreturnAt(caller.addr):
		return "a signal handler returns to the trampoline the kernel put there", true
	case caller.name == "runtime.mstart0" && (callee.name == "runtime.mcall" || callee.name == "runtime.morestack"):
		return "mcall and morestack call at the bottom of g0, which mstart0's frame holds", true
	}
	if o.jitReplaced(caller.addr-1, when) || o.jitReplaced(inside, when) {
		return "JIT code replaced since the sample", true
	}
	ra := caller.addr
	code := make([]byte, 15)
	if _, err := o.tp.Memory().ReadAt(code, ra-15); err != nil {
		// A JIT's code freed (or made unreadable) since the sample:
		// what was there cannot be read now.
		return "code not readable now: " + err.Error(), true
	}
	direct, indirect := callsEndingAt(code, ra)
	if len(direct) == 0 && !indirect {
		return fmt.Sprintf("no call ends at %#x: % x", ra, code), false
	}
	if indirect {
		return "", true
	}
	lo, hi, known := o.bounds(inside)
	if !known {
		return "", true // nothing to compare a direct call with
	}
	in := func(a uint64) bool { return a >= lo && a < hi }
	for _, raw := range direct {
		tgt := o.throughPLT(raw)
		if in(raw) || in(tgt) {
			return "", true
		}
		reach, known := o.reaches(tgt, lo, hi, 4)
		if !known {
			return "the call's target is code whose extent nobody knows", true
		}
		if reach {
			return "", true
		}
	}
	return fmt.Sprintf("the call before it calls %#x, not %s at %#x–%#x, and nothing there jumps into it", direct[0], callee.name, lo, hi), false
}

// inSigreturn reports whether pc is in an rt_sigreturn trampoline: at
// its start, after its mov (5 or 7 bytes), or after its system call.
func (o *callSiteOracle) inSigreturn(pc uint64) bool {
	for _, back := range []uint64{0, 5, 7, 9} {
		if pc >= back && o.sigreturnAt(pc-back) {
			return true
		}
	}
	return false
}

// sigreturnAt reports whether the code at pc is an rt_sigreturn
// trampoline (mov $15, %rax or %eax; syscall), where a signal handler
// returns: glibc's __restore_rt, Go's sigreturn__sigaction.
func (o *callSiteOracle) sigreturnAt(pc uint64) bool {
	code := make([]byte, 16)
	if _, err := o.tp.Memory().ReadAt(code, pc); err != nil {
		return false
	}
	inst, err := x86asm.Decode(code, 64)
	if err != nil || inst.Op != x86asm.MOV || inst.Args[0] != x86asm.RAX && inst.Args[0] != x86asm.EAX || inst.Args[1] != x86asm.Imm(15) {
		return false
	}
	next, err := x86asm.Decode(code[inst.Len:], 64)
	return err == nil && next.Op == x86asm.SYSCALL
}

// callsEndingAt decodes every call instruction that ends at ra, whatever
// its start: the targets of the direct ones, and whether an indirect one
// fits.
func callsEndingAt(code []byte, ra uint64) (direct []uint64, indirect bool) {
	for start := 0; start < len(code); start++ {
		inst, err := x86asm.Decode(code[start:], 64)
		if err != nil || inst.Op != x86asm.CALL || inst.Len != len(code)-start {
			continue
		}
		if rel, ok := inst.Args[0].(x86asm.Rel); ok {
			direct = append(direct, ra+uint64(int64(rel)))
		} else {
			indirect = true
		}
	}
	return direct, indirect
}

// bounds is the function holding pc, from its binary's tables or the
// JIT's records.
func (o *callSiteOracle) bounds(pc uint64) (lo, hi uint64, ok bool) {
	m := o.tp.Space().ModuleAt(pc)
	if m == nil {
		return 0, 0, false
	}
	if m.File != nil {
		if g, _ := m.File.Go(); g != nil {
			if lo, hi, ok := g.FuncBounds(pc - m.Bias); ok {
				return lo + m.Bias, hi + m.Bias, true
			}
		}
		if c, _ := m.File.CFI(); c != nil {
			if lo, hi, ok := c.FuncRange(pc - m.Bias); ok {
				return lo + m.Bias, hi + m.Bias, true
			}
		}
		return 0, 0, false
	}
	return o.tp.JITCode(pc, 0)
}

// jitReplaced reports whether the JIT code at pc now is not what was
// there at time when.
func (o *callSiteOracle) jitReplaced(pc, when uint64) bool {
	if m := o.tp.Space().ModuleAt(pc); m != nil && m.File != nil {
		return false
	}
	lo0, hi0, ok0 := o.tp.JITCode(pc, when)
	lo1, hi1, ok1 := o.tp.JITCode(pc, 0)
	return ok0 != ok1 || lo0 != lo1 || hi0 != hi1
}

// throughPLT follows a PLT entry (jmp *GOT(%rip), after endbr64 perhaps)
// to where its GOT slot points now.
func (o *callSiteOracle) throughPLT(tgt uint64) uint64 {
	code := make([]byte, 16)
	if _, err := o.tp.Memory().ReadAt(code, tgt); err != nil {
		return tgt
	}
	at := 0
	if code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa { // endbr64
		at = 4
	}
	inst, err := x86asm.Decode(code[at:], 64)
	if err != nil || inst.Op != x86asm.JMP {
		return tgt
	}
	m, ok := inst.Args[0].(x86asm.Mem)
	if !ok || m.Base != x86asm.RIP {
		return tgt
	}
	slot := tgt + uint64(at+inst.Len) + uint64(m.Disp)
	var b [8]byte
	if _, err := o.tp.Memory().ReadAt(b[:], slot); err != nil {
		return tgt
	}
	return binary.LittleEndian.Uint64(b[:])
}

// reaches reports whether the function at tgt reaches [lo, hi) by jumps
// alone: into it, through a register or memory (to anything), through a
// PLT entry, or to another function's entry that does, depth deep;
// known is false when tgt's extent is not known.
func (o *callSiteOracle) reaches(tgt, lo, hi uint64, depth int) (reach, known bool) {
	flo, fhi, ok := o.bounds(tgt)
	if !ok || flo != tgt || fhi-flo > 1<<20 {
		return false, false
	}
	code := make([]byte, fhi-flo)
	if _, err := o.tp.Memory().ReadAt(code, flo); err != nil {
		return false, false
	}
	var others []uint64
	for i := 0; i < len(code); {
		inst, err := x86asm.Decode(code[i:], 64)
		if err != nil {
			i++
			continue
		}
		i += inst.Len
		if inst.Op == x86asm.CALL || inst.Op != x86asm.JMP && !strings.HasPrefix(inst.Op.String(), "J") && !strings.HasPrefix(inst.Op.String(), "LOOP") {
			continue
		}
		switch a := inst.Args[0].(type) {
		case x86asm.Rel:
			dst := flo + uint64(i) + uint64(int64(a))
			if dst >= lo && dst < hi {
				return true, true
			}
			p := o.throughPLT(dst)
			if p >= lo && p < hi {
				return true, true // a tail call through a PLT entry
			}
			if p < flo || p >= fhi {
				others = append(others, p)
			}
		default:
			if inst.Op == x86asm.JMP {
				return true, true // through a register or memory: anything
			}
		}
	}
	if depth > 1 {
		for _, d := range others {
			if r, _ := o.reaches(d, lo, hi, depth-1); r {
				return true, true
			}
		}
	}
	return false, true
}

// startJVM runs OpenJDK's java on GcLoop: Java threads spinning in
// compiled code, full collections in the JVM's own C++.
func startJVM(t *testing.T) int {
	java := testutil.RequireTool(t, "java")
	tg := testutil.StartCmd(t, exec.Command(java, "-Xmx512m", "-XX:+UseG1GC", testutil.Testdata(t, "stalls", "GcLoop.java"), "100"))
	tg.WaitLine(t, "ready", 60*time.Second)
	return tg.Pid
}

// startPostgresJIT runs a private PostgreSQL 15 cluster that JIT compiles
// every query (jit_above_cost=0), and in one session a hash aggregation
// over a table again and again: the backend spends its time in LLVM's
// code (expressions, tuple deforming) called from PostgreSQL's executor.
// With debugging, the JIT registers each module with the GDB JIT
// interface.
func startPostgresJIT(debugging bool) func(t *testing.T) int {
	return func(t *testing.T) int {
		// Every query compiled, without inlining or optimization (they
		// cost more than the query): its time goes to the compiled code.
		settings := []string{"jit=on", "jit_above_cost=0", "jit_inline_above_cost=-1", "jit_optimize_above_cost=-1"}
		if debugging {
			settings = append(settings, "jit_debugging_support=on")
		}
		pg := testutil.StartPostgres(t, settings...)
		pg.Psql(t, "CREATE TABLE t AS SELECT g AS x, g % 1000 AS k FROM generate_series(1, 1000000) g; ANALYZE t;")
		pid := pg.Backend(t, `DO $$
BEGIN
  FOR i IN 1..100000 LOOP
    PERFORM count(*) FROM (SELECT k, sum(x*2+1), avg(x), max(x-k) FROM t GROUP BY k) s;
  END LOOP;
END $$;
`)
		testutil.WaitCPU(t, pid, 300*time.Millisecond, 30*time.Second)
		return pid
	}
}

// TestGDBJITInterface: the code LLVM's JITs register with the GDB JIT
// interface (lli, which runs LLVM IR; PostgreSQL's llvmjit with
// jit_debugging_support) is named and unwound from the objects read from
// the target's memory: lli's JIT-compiled leaf ← middle ← outer ← main,
// built without frame pointers, are named and walked to the thread's
// first function; PostgreSQL's JIT-compiled expressions (evalexpr_*) are
// named and their callers in PostgreSQL found, in the code of each query
// from the first sample taken in it.
func TestGDBJITInterface(t *testing.T) {
	testutil.RequirePerf(t)
	t.Run("lli", func(t *testing.T) {
		lli := testutil.RequireTool(t, "lli")
		tg := testutil.Start(t, lli, testutil.Testdata(t, "llvm", "spin.ll"))
		tg.WaitLine(t, "ready", 30*time.Second)
		_, p, info, _ := recordCPU(t, tg.Pid, time.Second, func(c *Config) { c.NoOffCPU = true })
		ours, _ := ourStacks(p)
		inLeaf, whole := 0, 0
		for _, s := range ours {
			if len(s) == 0 || s[0] != "leaf" {
				continue
			}
			inLeaf++
			if inOrder(s[1:], []string{"middle", "outer", "main"}) && isComplete(s) {
				whole++
			}
		}
		t.Logf("%d of %d samples in the JIT's leaf named and whole to the thread's first function; notes %q", whole, inLeaf, info.Notes)
		if inLeaf < 20 || float64(whole) < 0.99*float64(inLeaf) {
			t.Errorf("%d of %d samples in leaf have leaf ← middle ← outer ← main to the thread's first function", whole, inLeaf)
		}
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		pid := startPostgresJIT(true)(t)
		_, p, info, _ := recordCPU(t, pid, time.Second, func(c *Config) { c.NoOffCPU = true })
		ours, _ := ourStacks(p)
		jitted, anon, whole := 0, 0, 0
		for _, s := range ours {
			for i, fn := range s {
				if strings.HasPrefix(fn, "[anon]") {
					anon++
				}
				if !strings.HasPrefix(fn, "evalexpr_") && !strings.HasPrefix(fn, "deform_") {
					continue
				}
				jitted++
				if isComplete(s) && i+1 < len(s) {
					whole++
				}
				break
			}
		}
		t.Logf("%d samples in JIT-compiled expressions, %d of them whole; %d frames in unnamed JIT code; notes %q", jitted, whole, anon, info.Notes)
		if jitted < 20 {
			for _, s := range ours[:min(5, len(ours))] {
				t.Logf("a stack: %s", strings.Join(s, " ← "))
			}
		}
		if jitted < 20 {
			t.Fatalf("%d samples in named JIT-compiled expressions", jitted)
		}
		// Each query's code is registered, run and freed within a
		// fraction of a second, often where the last query's was: the
		// samples taken in it before its object was read are its (the
		// read before would have found it), and a sample newer than
		// the last read has the list's head looked at. Before both,
		// 1 to 49 frames a run were in unnamed JIT code and up to 35
		// stacks cut there, under load.
		if float64(whole) < 0.98*float64(jitted) {
			t.Errorf("%d of %d samples in JIT-compiled expressions reach the thread's first function", whole, jitted)
		}
		if anon*100 > jitted {
			t.Errorf("%d frames in JIT code no object named, for %d samples in JIT-compiled expressions", anon, jitted)
		}
	})
}
