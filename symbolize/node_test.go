package symbolize

import (
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/sampler"
)

// startNode runs testdata/symbols/node/spin.js under node --perf-prof in a
// temporary directory (where V8 writes jit-<pid>.dump).
func startNode(t testing.TB) (*testutil.Target, string) {
	t.Helper()
	node := testutil.RequireTool(t, "node")
	script := testutil.Testdata(t, "symbols", "node", "spin.js")
	cmd := exec.Command(node, "--perf-prof", "--interpreted-frames-native-stack", script)
	cmd.Dir = t.TempDir()
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 60*time.Second)
	return tg, script
}

// record samples pid on-CPU with callchains at 997 Hz until its threads
// have used cpu of CPU time (at most a minute), and returns the samples
// and the CPU time they stand for.
func record(t testing.TB, pid int, cpu time.Duration, kernel bool) ([]sampler.Sample, time.Duration) {
	t.Helper()
	testutil.RequirePerf(t)
	s, err := sampler.Start(sampler.Config{PID: pid, Freq: 997, Kernel: kernel, History: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.StartRecording()
	used := testutil.WaitCPU(t, pid, cpu, time.Minute)
	return r.Stop(), used
}

// TestNodeJIT samples a live Node.js process that spins in a JS function
// and resolves the samples' stacks at their times: the function's name,
// script and line come from the jitdump V8 writes.
func TestNodeJIT(t *testing.T) {
	tg, script := startNode(t)
	p := newTestProcess(t, tg.Pid, testOptions{JIT: true, Kernel: true})
	samples, used := record(t, tg.Pid, 1500*time.Millisecond, true)
	if err := p.Refresh(); err != nil {
		t.Fatal(err)
	}
	var onCPU, withFib int
	var fib *model.Location
	var fibPC, fibTime, nodePC uint64
	var locs []*model.Location
	for _, s := range samples {
		if s.Kind != sampler.OnCPU || len(s.Stack) == 0 {
			continue
		}
		onCPU++
		locs = p.LocateStack(locs[:0], s.Stack, int(s.Kernel), s.Time)
		for i, l := range locs {
			if i > int(s.Kernel) && i < len(s.Stack) && l.Mapping != nil && strings.HasSuffix(l.Mapping.File, "/node") && l.Kind == model.KindNative {
				nodePC = s.Stack[i]
			}
			if l.Name() == "fibonacci" {
				withFib++
				fib, fibPC, fibTime = l, s.Stack[i], s.Time
				break
			}
		}
	}
	// cpu-clock samples each thread per period of its own CPU time; a
	// few may be lost or land in a recording's edges.
	if want := int(used.Seconds() * 997 / 2); onCPU < want || onCPU == 0 {
		t.Fatalf("only %d on-CPU samples for %v of the target's CPU time at 997 Hz, want at least %d", onCPU, used, want)
	}
	// The main thread spins in fibonacci; V8's helper threads take a
	// few samples of their own.
	if withFib*10 < onCPU*6 {
		t.Errorf("fibonacci is in %d of %d on-CPU stacks, want at least 60%%; stats: %+v", withFib, onCPU, p.Stats())
	}
	if fib == nil {
		t.Fatal("no fibonacci frame")
	}
	if fib.Kind != model.KindJIT || fib.Mapping == nil || fib.Mapping.File != "[jit]" || fib.Lines[0].File != script ||
		fib.Lines[0].Line != lineOf(t, script, "function fibonacci(") || !strings.Contains(fib.Lines[0].SystemName, "fibonacci") {
		t.Errorf("fibonacci frame: %s", describe(fib))
	}
	st := p.Stats()
	var anonAddrs, anonUnnamed int
	for _, ms := range st.Mappings {
		if ms.File == "[anon]" {
			anonAddrs += ms.Addresses
			anonUnnamed += ms.Unnamed
		}
		// node's text is linked 4 MiB above its file offset: every
		// address sampled in it must be named (the bias is right).
		if strings.HasSuffix(ms.File, "/node") && (ms.Unnamed != 0 || ms.Addresses == 0 || ms.Symbols != "symtab") {
			t.Errorf("node's own code: %+v", ms)
		}
	}
	// Addresses the JIT named are not counted as unnamed.
	if anonUnnamed*2 > anonAddrs {
		t.Errorf("%d of %d addresses in anonymous memory counted unnamed", anonUnnamed, anonAddrs)
	}
	if st.JITFrames == 0 || len(st.JIT) == 0 || st.JIT[0].Kind != jit.KindJitdump || st.JIT[0].Symbols == 0 {
		t.Errorf("Stats: JIT frames %d, sources %+v", st.JITFrames, st.JIT)
	}

	// At a time before V8 loaded that code, the address held something
	// else (or nothing): the time picks the code.
	jp, err := jit.OpenProcess(tg.Pid, jit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer jp.Close()
	sym, ok := jp.Index().LookupAt(fibPC, fibTime)
	if !ok || sym.Loaded == 0 {
		t.Fatalf("jit has no timed code at %#x", fibPC)
	}
	if before := p.Locate(Addr{PC: fibPC, Time: sym.Loaded - 1, Return: true}); before == fib {
		t.Errorf("Locate at a time before the code was loaded gave the same location %s", describe(before))
	}
	if latest := p.Locate(Addr{PC: fibPC, Time: math.MaxUint64}); latest.Kind != model.KindJIT {
		t.Errorf("Locate at the latest time: %s", describe(latest))
	}

	// A stack with JIT code is named by its time, one of node's own
	// code is not (a capture shares its locations among the samples).
	if _, timed := p.LocateSampleTimed(nil, []uint64{fibPC}, 0, fibTime, unwind.Cut{}); !timed {
		t.Errorf("the stack of fibonacci's code (%#x) is not said to be named by its time", fibPC)
	}
	if nodePC == 0 {
		t.Fatal("no sampled address in node's own code")
	}
	if locs, timed := p.LocateSampleTimed(nil, []uint64{nodePC}, 0, fibTime, unwind.Cut{}); timed {
		t.Errorf("the stack of node's own code (%s) is said to be named by its time", describe(locs[0]))
	}
}
