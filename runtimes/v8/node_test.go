package v8_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
	v8 "github.com/stallwatch/stallwatch/runtimes/v8"
	"github.com/stallwatch/stallwatch/symbolize"
	"github.com/stallwatch/stallwatch/target"
)

// TestNodeBlocked reads, from outside, the JavaScript frames of a real
// Node.js blocked in Atomics.wait inside outer → middle → inner → block,
// with V8 running them in each of its tiers, and compares them with the
// stack V8 itself gave at that moment (new Error().stack, written by the
// target): every function, script, line and column, in order.
func TestNodeBlocked(t *testing.T) {
	node := testutil.RequireTool(t, "node")
	for _, tc := range []struct {
		name  string
		flags []string
		warm  bool
		kind  v8.Kind // the kind block's frame must be of
	}{
		{"interpreted", nil, false, v8.Interpreted},
		{"baseline", []string{"--always-sparkplug"}, false, v8.Baseline},
		{"optimized", []string{"--always-turbofan"}, false, v8.Optimized},
		{"optimized and inlined", nil, true, v8.Optimized},
		{"every shape of function", nil, false, v8.Interpreted},
		{"every shape of function, baseline", []string{"--always-sparkplug"}, false, v8.Baseline},
		{"every shape of function, optimized", []string{"--always-turbofan"}, false, v8.Optimized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stackFile := filepath.Join(t.TempDir(), "stack")
			args := append(append([]string{}, tc.flags...), testutil.Testdata(t, "node", "jsstack.js"), stackFile, "block")
			if tc.warm {
				args = append(args, "warm")
			} else if strings.HasPrefix(tc.name, "every shape") {
				args = append(args, "shapes")
			}
			tg := testutil.StartCmd(t, exec.Command(node, args...))
			tg.WaitLine(t, "blocking", 60*time.Second)
			waitFutex(t, tg.Pid)
			want := testutil.ReadErrorStack(t, stackFile)

			frames, kinds := readJSFrames(t, tg.Pid)
			compareStacks(t, frames, want)
			if len(kinds) == 0 || kinds[0] != tc.kind {
				t.Errorf("block's frame is %v, want %v (kinds %v)", kinds, tc.kind, kinds)
			}
			if tc.warm && !inlined(frames, kinds) {
				t.Logf("V8 did not inline: kinds %v", kinds)
			}
		})
	}
}

// inlined reports whether one optimized frame held several functions.
func inlined(frames []v8.Function, kinds []v8.Kind) bool {
	return len(frames) > len(kinds)
}

// waitFutex waits until thread tid sleeps in futex(2).
func waitFutex(t *testing.T, tid int) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/task/%d/syscall", tid, tid)
	err := testutil.Eventually(30*time.Second, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && strings.HasPrefix(string(b), "202 ")
	})
	if err != nil {
		t.Fatalf("thread %d never slept in futex: %v", tid, err)
	}
}

// readJSFrames reads the JavaScript frames of thread pid's stack, without
// stopping it (it sleeps in the kernel), innermost first, and the kind of
// each V8 frame they came from.
func readJSFrames(t *testing.T, pid int) ([]v8.Function, []v8.Kind) {
	t.Helper()
	p, err := target.Open(pid, target.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var layout *v8.Layout
	for _, m := range p.Space().Modules() {
		if m.File == nil {
			continue
		}
		if l, err := v8.LoadLayout(m.File); err == nil {
			layout = l
			break
		}
	}
	if layout == nil {
		t.Fatal("no module of node has V8's postmortem symbols")
	}
	tr, err := p.Unwinder().BlockedTrace(pid, unwind.MaxFrames)
	if err != nil {
		t.Fatal(err)
	}
	r := v8.NewReader(layout, p.Memory())
	var fns []v8.Function
	var kinds []v8.Kind
	for i, pc := range tr.PCs {
		at := v8.At{FP: tr.FPs[i], PC: pc, Return: !tr.Exact[i], Code: codeAt(p, pc, !tr.Exact[i])}
		fr, err := r.Frame(at)
		if err != nil || fr.Kind == v8.Typed {
			continue
		}
		if fr.LineErr != nil && fr.Kind != v8.Builtin {
			t.Errorf("frame %d (%v %+v): %v", i, fr.Kind, fr.Functions, fr.LineErr)
		}
		fns = append(fns, fr.Functions...)
		kinds = append(kinds, fr.Kind)
	}
	return fns, kinds
}

// codeAt says what code pc is in: JIT code in anonymous memory, V8's
// builtins (named Builtins_*), or else code of the binary.
func codeAt(p *target.Process, pc uint64, ret bool) v8.Code {
	m := p.Space().ModuleAt(pc)
	if m != nil && m.Anon {
		return v8.CodeJIT
	}
	loc := p.Symbols().Locate(symbolize.Addr{PC: pc, Return: ret})
	if strings.HasPrefix(loc.Name(), "Builtins_") {
		return v8.CodeBuiltins
	}
	return v8.CodeUnknown
}

// compareStacks checks frames read from outside against V8's own stack
// trace: the same scripts, lines and columns in the same order (the top
// frame's column aside: the stack was taken on the line, the thread
// waits further along it), and the same function names, but for the
// receiver's type a method call's trace puts before its name
// ("Module._load" for _load) and the alias after it ("[as runMain]"). A
// builtin has neither script nor line.
func compareStacks(t *testing.T, got []v8.Function, trace []testutil.JSFrame) {
	t.Helper()
	want := make([]v8.Function, len(trace))
	for i, f := range trace {
		want[i] = v8.Function{Name: f.Name, Script: f.Script, Line: f.Line, Column: f.Column}
	}
	if len(got) != len(want) {
		t.Fatalf("%d JavaScript frames read, V8's stack has %d:\nread:\n%s\nV8's:\n%s", len(got), len(want), fmtStack(got), fmtStack(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if i == 0 {
			w.Column, g.Column = 0, 0
		}
		if g.Script != w.Script || g.Line != w.Line || g.Column != w.Column || !testutil.SameJSName(g.Name, w.Name) {
			t.Errorf("frame %d: read %s, V8 says %s\nread:\n%s\nV8's:\n%s", i, fmtFunction(g), fmtFunction(w), fmtStack(got), fmtStack(want))
			return
		}
	}
}

func fmtFunction(f v8.Function) string {
	return fmt.Sprintf("%q (%s:%d:%d)", f.Name, f.Script, f.Line, f.Column)
}

func fmtStack(fs []v8.Function) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s\n", fmtFunction(f))
	}
	return b.String()
}
