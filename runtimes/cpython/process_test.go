package cpython_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/runtimes/cpython"
	"github.com/stallwatch/stallwatch/snapshot"
	"github.com/stallwatch/stallwatch/symbolize"
	"github.com/stallwatch/stallwatch/target"
)

func openPython(t *testing.T, pid int) *cpython.Runtime {
	t.Helper()
	p, err := target.Open(pid, target.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rt, err := targetPython(p)
	if err != nil {
		t.Fatalf("Python: %v", err)
	}
	return rt
}

// targetPython is the CPython runtime a target finds through its
// descriptor's reader (runtimes.Python).
func targetPython(p *target.Process) (*cpython.Runtime, error) {
	inst, err := p.Reader(runtimes.Python)
	if err != nil {
		return nil, err
	}
	return inst.(interface{ CPython() *cpython.Runtime }).CPython(), nil
}

func gotFrames(fs []cpython.Frame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, testutil.PyFrame(f.Function, f.File, f.Line))
	}
	return out
}

// TestDumpMatchesPython reads every thread of a real CPython of each
// version, from the outside and without stopping it, and compares its
// frames (qualified names, files, lines) with what the program's own
// sys._current_frames() says of them.
func TestDumpMatchesPython(t *testing.T) {
	testutil.RequirePtrace(t)
	for _, py := range testutil.Pythons {
		t.Run(py.Name, func(t *testing.T) {
			python := testutil.RequireTool(t, py.Path)
			pid, want := testutil.FramesTarget(t, python)
			rt := openPython(t, pid)
			if rt.Version().Minor != py.Minor {
				t.Fatalf("version %s, want 3.%d", rt.Version(), py.Minor)
			}
			d, err := rt.Dump()
			if err != nil {
				t.Fatalf("Dump: %v (notes: %q)", err, rt.Notes())
			}
			checkDump(t, d, want)
		})
	}
}

func checkDump(t *testing.T, d *cpython.Dump, want map[int]testutil.PyThread) {
	t.Helper()
	got := map[int]cpython.Thread{}
	for _, th := range d.Threads {
		if th.Err != nil {
			t.Errorf("tid %d: %v", th.TID, th.Err)
		}
		got[th.TID] = th
	}
	if len(got) != len(want) {
		t.Errorf("%d thread states, want %d", len(got), len(want))
	}
	for tid, w := range want {
		g, ok := got[tid]
		if !ok {
			t.Errorf("no thread state for tid %d %q", tid, w.Name)
			continue
		}
		if gf, wf := gotFrames(g.Frames), w.Want(); !slices.Equal(gf, wf) {
			t.Errorf("tid %d %q:\n got %s\nwant %s", tid, w.Name, strings.Join(gf, "\n     "), strings.Join(wf, "\n     "))
		}
		if g.HoldsGIL && (w.Name == "reader" || w.Name == "main") {
			t.Errorf("tid %d %q holds the GIL while blocked in read", tid, w.Name)
		}
	}
	if len(d.GILs) != 1 {
		t.Errorf("%d GILs, want 1", len(d.GILs))
	}
}

// hidden hides one symbol of an image.
type hidden struct {
	cpython.Symbols
	name string
}

func (h hidden) Symbol(name string) (uint64, uint64, bool) {
	if name == h.name {
		return 0, 0, false
	}
	return h.Symbols.Symbol(name)
}

// TestFindWithoutSymbol finds _PyRuntime where no symbol names it, as in
// a build stripped of its dynamic symbols too: by the .PyRuntime section
// (3.10+), else by scanning the image's writable sections (3.8, 3.9, and
// a build whose section has another name). It must find what the symbol
// says, and read the same threads.
func TestFindWithoutSymbol(t *testing.T) {
	testutil.RequirePtrace(t)
	cases := []struct {
		python        string
		renameSection bool
	}{
		{"/usr/bin/python3", false},
		{"/usr/bin/python3", true},
		{"/root/.pyenv/versions/3.8.18/bin/python3", false},
		{"/root/.pyenv/versions/3.10.13/bin/python3", true},
		{"/root/.pyenv/versions/3.13.0/bin/python3", false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/rename-section=%v", c.python, c.renameSection), func(t *testing.T) {
			python := testutil.RequireTool(t, c.python)
			pid, want := testutil.FramesTarget(t, python)
			p, err := target.Open(pid, target.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			withSymbol, err := targetPython(p)
			if err != nil {
				t.Fatal(err)
			}
			images := runtimes.PythonImages(p.ReaderProcess())
			for i := range images {
				images[i].Symbols = hidden{images[i].Symbols, "_PyRuntime"}
				for j := range images[i].Sections {
					if s := &images[i].Sections[j]; c.renameSection && s.Name == ".PyRuntime" {
						s.Name = ".data.rel.unknown"
					}
				}
			}
			tids, _ := procfs.Threads(pid)
			rt, err := cpython.Open(p.Memory(), images, cpython.Options{TIDs: tids})
			if err != nil {
				t.Fatalf("Open without the symbol: %v", err)
			}
			if rt.Address() != withSymbol.Address() {
				t.Fatalf("found _PyRuntime at %#x, the symbol says %#x (notes %q)", rt.Address(), withSymbol.Address(), rt.Notes())
			}
			d, err := rt.Dump()
			if err != nil {
				t.Fatal(err)
			}
			checkDump(t, d, want)
		})
	}
}

// TestVersionsNotRead: the CPythons this machine has that the reader
// does not know say which they are and which are known, as a typed error.
func TestVersionsNotRead(t *testing.T) {
	testutil.RequirePtrace(t)
	for _, c := range []struct{ python, version string }{
		{"/root/.pyenv/versions/3.7.16/bin/python3", "3.7"},
		{"/root/.pyenv/versions/3.6.15/bin/python3", "3.6"},
		{"/root/.pyenv/versions/2.7.18/bin/python2", "2.7"},
	} {
		t.Run(c.version, func(t *testing.T) {
			python := testutil.RequireTool(t, c.python)
			tg := testutil.Start(t, python, "-c", "import os, sys; sys.stdout.write('ready %d\\n' % os.getpid()); sys.stdout.flush(); os.read(os.pipe()[0], 1)")
			tg.WaitLine(t, "ready", 30*time.Second)
			p, err := target.Open(tg.Pid, target.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			_, err = targetPython(p)
			var ve *cpython.VersionError
			if !errors.As(err, &ve) || ve.Version.String() != c.version {
				t.Fatalf("Python: %v, want a VersionError for %s", err, c.version)
			}
			if !strings.Contains(err.Error(), strings.Join(cpython.Known(), ", ")) {
				t.Errorf("%q does not say which versions are known", err)
			}
		})
	}
}

// TestReadWhileRunning reads a target that pushes and pops frames and
// starts and ends threads as fast as it can, without stopping it: what is
// read may be cut short (a typed error says why), but every frame read
// is one of the program's (or of the standard library it runs), never
// garbage taken for a frame.
func TestReadWhileRunning(t *testing.T) {
	testutil.RequirePtrace(t)
	for _, py := range testutil.Pythons {
		t.Run(py.Name, func(t *testing.T) {
			python := testutil.RequireTool(t, py.Path)
			script := testutil.Testdata(t, "python", "churn.py")
			tg := testutil.Start(t, python, script)
			tg.WaitLine(t, "ready", 30*time.Second)
			rt := openPython(t, tg.Pid)
			// The program's threads also run the standard library's code
			// it calls into: threading.py, and the weakref callbacks of
			// threading's WeakSet of threads (_weakrefset.py) when the
			// collector frees one.
			out, err := exec.Command(py.Path, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])").Output()
			if err != nil {
				t.Fatalf("%s: its standard library: %v", py.Path, err)
			}
			stdlib := strings.TrimSpace(string(out)) + "/"
			var frames, cut int
			for range 200 {
				d, err := rt.Dump()
				if err != nil && !typed(err) {
					t.Fatalf("Dump: untyped error %v", err)
				}
				for _, th := range d.Threads {
					if th.Err != nil {
						if !typed(th.Err) {
							t.Fatalf("tid %d: untyped error %v", th.TID, th.Err)
						}
						cut++
					}
					for _, f := range th.Frames {
						frames++
						if f.File != script && !strings.HasPrefix(f.File, stdlib) || f.Line <= 0 {
							t.Fatalf("tid %d: frame %v is none of the program's", th.TID, f)
						}
					}
				}
			}
			t.Logf("%d frames read, %d walks cut short", frames, cut)
			if frames < 1000 {
				t.Errorf("only %d frames read in 200 dumps", frames)
			}
		})
	}
}

// typed says whether err is one of the errors the reader documents.
func typed(err error) bool {
	var re *cpython.ReadError
	var ce *cpython.CorruptError
	return errors.As(err, &re) || errors.As(err, &ce) || errors.Is(err, cpython.ErrTooDeep) || errors.Is(err, cpython.ErrNotInitialized)
}

// TestEntriesMatchNativeStacks: the calls of the evaluation function that
// Frame.Entry delimits are, one to one, the _PyEval_EvalFrameDefault
// frames of each thread's native stack (read by a snapshot under ptrace:
// the threads stay where they are), on every version — what putting
// Python frames in place of native ones relies on.
func TestEntriesMatchNativeStacks(t *testing.T) {
	testutil.RequirePtrace(t)
	for _, py := range testutil.Pythons {
		t.Run(py.Name, func(t *testing.T) {
			python := testutil.RequireTool(t, py.Path)
			pid, want := testutil.FramesTarget(t, python)
			p, err := target.Open(pid, target.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			rt, err := targetPython(p)
			if err != nil {
				t.Fatal(err)
			}
			d, err := rt.Dump()
			if err != nil {
				t.Fatal(err)
			}
			snap, err := snapshot.Take(context.Background(), pid, snapshot.Options{Target: p})
			if err != nil {
				t.Fatal(err)
			}
			// The native stack as unwound (the snapshot's own stacks have
			// the Python frames in place already).
			native := map[int]int{}
			for _, th := range snap.Threads {
				for j, pc := range th.UserAddrs {
					l := p.Symbols().Locate(symbolize.Addr{PC: pc, Time: snap.Mono, Return: j > 0 && !(j < len(th.UserExact) && th.UserExact[j])})
					if len(l.Lines) > 0 && cpython.IsEvalFunction(l.Lines[len(l.Lines)-1].Function) {
						native[th.TID]++
					}
				}
			}
			for _, th := range d.Threads {
				calls := len(cpython.Calls(th.Frames))
				if native[th.TID] != calls {
					t.Errorf("tid %d %q: %d evaluation frames on the native stack, %d calls in the Python frames %s",
						th.TID, want[th.TID].Name, native[th.TID], calls, strings.Join(gotFrames(th.Frames), " ← "))
				}
			}
		})
	}
}
