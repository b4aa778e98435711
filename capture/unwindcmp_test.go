package capture

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// The on-CPU stacks of real programs nobody here wrote (and of ours built
// as distributions build), unwound from stack copies, against `perf record
// --call-graph dwarf` with the same copy size on the same process: our
// stacks must be complete (reach the thread's first function) at least
// wherever perf's are, along the same callers, and never hold a frame
// outside executable code.

// outermost are the functions a thread's stack starts in.
var outermost = map[string]bool{"_start": true, "clone3": true, "__clone3": true, "clone": true, "__clone": true,
	"runtime.goexit": true, "__libc_start_main": true}

// unwindWorkload is a program to compare, and the callers its hot
// function must have, in order (not necessarily adjacent).
type unwindWorkload struct {
	name  string
	start func(t *testing.T) *testutil.Target
	hot   string   // the innermost function of the chain checked
	chain []string // hot's callers, innermost first
}

func TestUnwindAgainstPerf(t *testing.T) {
	if testing.Short() {
		t.Skip("records each workload twice (stallwatch and perf): slow")
	}
	testutil.RequirePerf(t)
	testutil.RequireTool(t, "perf")
	for _, w := range []unwindWorkload{
		{name: "C -O2 without frame pointers", start: startNoFP, hot: "leaf", chain: []string{"middle", "outer", "worker", "start_thread"}},
		{name: "Debian python3", start: startPython("/usr/bin/python3"), hot: "_PyEval_EvalFrameDefault", chain: []string{"PyEval_EvalCode", "Py_RunMain", "Py_BytesMain"}},
		{name: "xz -9 -T1", start: startXZ, hot: "lzma_code", chain: []string{"__libc_start_main"}},
		{name: "node", start: startNode, hot: "fibonacci", chain: []string{"node::Start"}},
		{name: "CPython 3.12 -X perf", start: startPython(python312, "-X", "perf"), hot: "hot_leaf", chain: []string{"middle", "outer", "main", "PyEval_EvalCode", "Py_RunMain"}},
		// The trampolines' names are in CPython's buffered jitdump, not
		// written yet: the interpreter's frames must all be there.
		{name: "CPython 3.13 -X perf_jit", start: startPython(python313, "-X", "perf_jit"), hot: "_PyEval_EvalFrameDefault", chain: []string{"PyEval_EvalCode", "Py_RunMain", "Py_BytesMain"}},
	} {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel() // a target, a perf and a recording of its own, 3 s of each
			compareWithPerf(t, w)
		})
	}
}

// TestStackCopyTooSmall: a stack deeper than the stack copy, in code
// without frame pointers, ends with a pseudo-frame saying the copy was
// exhausted (never a guessed frame), and capture.json says which
// --stack-copy reaches further.
func TestStackCopyTooSmall(t *testing.T) {
	testutil.RequirePerf(t)
	// 300 frames of recurse() under the hot chain: several KiB of stack.
	tg := startNoFPArgs(t, "-depth", "300")
	const copySize = 1 << 10
	_, p, info, _ := recordCPU(t, tg.Pid, time.Second, func(c *Config) {
		c.NoOffCPU, c.Unwind, c.StackCopy = true, UnwindCFI, copySize
	})
	const cut = "[truncated: stack copy of 1 KiB exhausted]"
	ours, _ := ourStacks(p)
	deep, exhausted := 0, 0
	for _, s := range ours {
		// Only samples below the whole recursion are surely deeper than
		// the copy (the recursion's own frames come and go).
		if indexOf(s, "leaf") < 0 && indexOf(s, "middle") < 0 && indexOf(s, "outer") < 0 {
			continue
		}
		deep++
		last := s[len(s)-1]
		if isComplete(s) || !strings.HasPrefix(last, "[truncated: ") {
			t.Fatalf("a stack deeper than the %d-byte copy does not end with why it was cut: %v", copySize, s)
		}
		for _, fn := range s {
			if strings.HasPrefix(fn, "[unknown]") {
				t.Fatalf("a frame outside every mapping: %v", s)
			}
		}
		if last == cut {
			exhausted++
		}
	}
	if deep < 20 {
		t.Fatalf("%d samples under 300 frames of recurse(): too few to judge", deep)
	}
	// The walk can end otherwise only where it joined the kernel's
	// frame-pointer chain (-O2 code keeps no frame pointer: rarely).
	if float64(exhausted) < 0.99*float64(deep) {
		t.Errorf("%d of %d samples under 300 frames of recurse() end with %q", exhausted, deep, cut)
	}
	notes := strings.Join(info.Notes, "\n")
	if !strings.Contains(notes, "stacks were deeper than the 1 KiB stack copy: --stack-copy 2KiB reaches further") ||
		!strings.Contains(notes, "stack copy of 1 KiB exhausted") {
		t.Errorf("capture.json's notes do not say the copy was too small, and the fix:\n%s", notes)
	}
}

// TestStackCopyShort: where the kernel copies less of the stack than it
// was asked (here a worker's frame holds a 64 KiB buffer whose pages are
// not resident, as memcached's worker loop does, and the kernel copies
// without faulting pages in), the stacks end saying so, and capture.json
// says why — not that a larger --stack-copy reaches further, which it
// does not — and the thread's copies do not grow.
func TestStackCopyShort(t *testing.T) {
	testutil.RequirePerf(t)
	gcc := testutil.RequireTool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "shortcopy")
	if out, err := exec.Command(gcc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(t, "shortcopy", "shortcopy.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	tg := testutil.Start(t, bin)
	tg.WaitLine(t, "ready", 10*time.Second)
	_, p, info, _ := recordCPU(t, tg.Pid, time.Second, func(c *Config) { c.NoOffCPU, c.Unwind = true, UnwindCFI })
	ours, _ := ourStacks(p)
	inLeaf, short := 0, 0
	for _, s := range ours {
		if len(s) < 2 || s[0] != "leaf" || !strings.HasPrefix(s[1], "buffered") { // buffered.constprop.0.isra.0, as gcc names its clone
			continue
		}
		inLeaf++
		last := s[len(s)-1]
		if strings.HasPrefix(last, "[truncated: stack copy cut short at ") && strings.HasSuffix(last, " of 16 KiB: its next page was not resident]") {
			short++
		} else if !isComplete(s) {
			t.Errorf("a stack under the buffer's non-resident pages ends otherwise: %v", s)
		}
	}
	if inLeaf < 20 {
		t.Fatalf("%d samples in leaf ← buffered: too few to judge; %d samples, the first %v", inLeaf, len(ours), ours[:min(3, len(ours))])
	}
	if float64(short) < 0.99*float64(inLeaf) {
		t.Errorf("%d of %d samples in leaf ← buffered say the copy was cut short", short, inLeaf)
	}
	notes := strings.Join(info.Notes, "\n")
	if strings.Contains(notes, "--stack-copy 32KiB reaches further") {
		t.Errorf("capture.json advises a larger copy, which the kernel would cut short the same:\n%s", notes)
	}
	if !strings.Contains(notes, "stacks end where the kernel copied only ") || !strings.Contains(notes, "of the 16 KiB of stack asked: the stack's next page was not resident") {
		t.Errorf("capture.json's notes do not say the kernel cut the copy short, and why:\n%s", notes)
	}
	// A larger copy would be cut short the same: the copies do not grow.
	if len(info.StackCopyGrown) > 0 || strings.Contains(notes, "grew from") {
		t.Errorf("stack copies the kernel cut short grew: %+v\n%s", info.StackCopyGrown, notes)
	}
	t.Logf("%d of %d samples in leaf ← buffered cut short; notes:\n%s", short, inLeaf, notes)
}

func compareWithPerf(t *testing.T, w unwindWorkload) {
	tg := w.start(t)
	// perf records the same seconds as we do: the same code on the stacks.
	run := testutil.StartPerfDwarf(t, tg.Pid, DefaultFreq, DefaultStackCopy, "3", t.TempDir())
	// Native frames only, as perf sees them: no Python frames in place
	// of the interpreter's.
	_, p, info := record(t, tg.Pid, 3*time.Second, func(c *Config) { c.NoOffCPU, c.Unwind, c.NativeOnly = true, UnwindCFI, true })
	perf := run.Stacks(t)

	ours, ourAddrs := ourStacks(p)
	if len(ours) < 50 || len(perf) < 50 {
		t.Fatalf("%d of our samples, %d of perf's: too few to compare (a loaded machine?)", len(ours), len(perf))
	}
	theirs := perfStacks(perf)
	oc, pc := completeShare(ours), completeShare(theirs)
	t.Logf("complete stacks: stallwatch %.1f%% of %d, perf --call-graph dwarf %.1f%% of %d; notes %q", 100*oc, len(ours), 100*pc, len(perf), info.Notes)
	if oc < pc-0.01 {
		t.Errorf("%.1f%% of our stacks reach their thread's first function, perf's %.1f%%", 100*oc, 100*pc)
	}
	for _, s := range ours {
		for _, fn := range s {
			if strings.HasPrefix(fn, "[unknown]") {
				t.Fatalf("a frame outside every mapping: %v", s)
			}
		}
	}
	sameCallers(t, ourAddrs, perf)
	var withHot, along int
	for _, s := range ours {
		i := indexOf(s, w.hot)
		if i < 0 || !isComplete(s) {
			continue
		}
		withHot++
		if inOrder(s[i+1:], w.chain) {
			along++
		}
	}
	if withHot < 10 {
		t.Fatalf("%d complete samples in %s", withHot, w.hot)
	}
	if float64(along) < 0.99*float64(withHot) {
		t.Errorf("%d of %d complete samples in %s have the callers %v", along, withHot, w.hot, w.chain)
	}
}

// ourStacks are the function names of each on-CPU sample, innermost
// first, kernel frames left out (inlined functions marked "name
// (inline)"), and their addresses as perf script prints them (offsets in
// the mapped file).
func ourStacks(p *profile.Profile) ([][]string, [][]uint64) {
	var out [][]string
	var addrs [][]uint64
	for _, s := range p.Sample {
		var names []string
		var rel []uint64
		for _, l := range s.Location {
			if l.Address >= 0xffff800000000000 || l.Mapping != nil && strings.HasPrefix(l.Mapping.File, "[kernel") {
				continue
			}
			a := l.Address
			if m := l.Mapping; m != nil && strings.HasPrefix(m.File, "/") {
				a = a - m.Start + m.Offset
			}
			rel = append(rel, a)
			for i, ln := range l.Line {
				name := ln.Function.Name
				if i < len(l.Line)-1 {
					name += " (inline)"
				}
				names = append(names, name)
			}
		}
		if len(names) > 0 {
			out = append(out, names)
			addrs = append(addrs, rel)
		}
	}
	return out, addrs
}

// perfStacks are perf's samples' user frames.
func perfStacks(ps []testutil.PerfStack) [][]string {
	var out [][]string
	for _, s := range ps {
		if len(s.Frames) > 0 {
			out = append(out, s.Frames)
		}
	}
	return out
}

// isComplete reports whether a stack reaches its thread's first function:
// one named so, or the caller of __libc_start_main or start_thread (in a
// stripped binary _start has no name).
func isComplete(s []string) bool {
	n := len(s)
	switch {
	case n == 0 || strings.HasPrefix(s[n-1], "[truncated"):
		return false
	case outermost[s[n-1]]:
		return true
	}
	return n >= 2 && (strings.HasPrefix(s[n-2], "__libc_start_main") || s[n-2] == "start_thread")
}

// sameCallers checks that the callers of perf's most frequent complete
// stacks are ours too: the same return addresses, frame for frame (the
// innermost frame, where each sample was taken, varies).
func sameCallers(t *testing.T, ours [][]uint64, perf []testutil.PerfStack) {
	t.Helper()
	counts := map[string]int{}
	stacks := map[string]testutil.PerfStack{}
	for _, s := range perf {
		if !isComplete(s.Frames) || len(s.Addrs) < 2 {
			continue
		}
		// perf prints a return address minus one (the call it names).
		callers := make([]uint64, len(s.Addrs)-1)
		for i, a := range s.Addrs[1:] {
			callers[i] = a + 1
		}
		k := fmt.Sprint(callers)
		counts[k]++
		stacks[k] = s
	}
	have := map[string]int{}
	for _, s := range ours {
		if len(s) >= 2 {
			have[fmt.Sprint(s[1:])]++
		}
	}
	common, n := "", 0
	for k, c := range have {
		if c > n {
			common, n = k, c
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	for _, k := range keys[:min(5, len(keys))] {
		if counts[k] >= 5 && have[k] == 0 {
			t.Errorf("the callers of perf's stack (%d samples) are none of ours:\n%s\n%x\nour most frequent callers (%d samples): %s",
				counts[k], strings.Join(stacks[k].Frames, " ← "), stacks[k].Addrs, n, common)
		}
	}
}

// pyenv installs CPython 3.12 and 3.13 here on this machine kind.
const (
	python312 = "/root/.pyenv/versions/3.12.1/bin/python3"
	python313 = "/root/.pyenv/versions/3.13.0/bin/python3"
)

func completeShare(stacks [][]string) float64 {
	n := 0
	for _, s := range stacks {
		if isComplete(s) {
			n++
		}
	}
	return float64(n) / float64(max(len(stacks), 1))
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

func startNoFP(t *testing.T) *testutil.Target { return startNoFPArgs(t) }

// startNoFPArgs builds testdata/nofp as distributions build (-O2, no frame
// pointers) and runs it with args.
func startNoFPArgs(t *testing.T, args ...string) *testutil.Target {
	gcc := testutil.RequireTool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "nofp")
	if out, err := exec.Command(gcc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(t, "nofp", "nofp.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	tg := testutil.Start(t, bin, args...)
	tg.WaitLine(t, "ready", 10*time.Second)
	return tg
}

func startPython(py string, args ...string) func(t *testing.T) *testutil.Target {
	return func(t *testing.T) *testutil.Target {
		testutil.RequireTool(t, py)
		cmd := exec.Command(py, append(args, testutil.Testdata(t, "python", "work.py"))...)
		cmd.Dir = t.TempDir()
		tg := testutil.StartCmd(t, cmd)
		tg.WaitLine(t, "ready", 30*time.Second)
		return tg
	}
}

// startXZ compresses 64 MiB of text made of repeated words (compressible,
// so that xz works in its match finder, not its literal coder) at -9.
func startXZ(t *testing.T) *testutil.Target {
	xz := testutil.RequireTool(t, "xz")
	// This test binary is tens of megabytes: xz -9 works on it for far
	// longer than the recording, and it costs nothing to make.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "input")
	if err := os.Link(self, in); err != nil {
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(in, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tg := testutil.StartCmd(t, exec.Command(xz, "-9", "-T1", "-k", "-f", in))
	// xz has no ready line: wait until it has used CPU.
	if err := testutil.Eventually(10*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tg.Pid))
		return err == nil && len(strings.Fields(string(b))) > 14 && strings.Fields(string(b))[13] != "0"
	}); err != nil {
		t.Fatal("xz never ran")
	}
	return tg
}

func startNode(t *testing.T) *testutil.Target {
	node := testutil.RequireTool(t, "node")
	cmd := exec.Command(node, "--perf-prof", testutil.Testdata(t, "node", "fib.js"))
	cmd.Dir = t.TempDir()
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 30*time.Second)
	return tg
}
