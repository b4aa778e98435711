package snapshot

import (
	"slices"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// pythonFrames are a thread's Python frames in its snapshot stack, and
// where the first of them is (-1: none).
func pythonFrames(th *model.Thread) ([]string, int) {
	var out []string
	first := -1
	for i, l := range th.User {
		if l.Kind != model.KindPython {
			continue
		}
		if first < 0 {
			first = i
		}
		ln := l.Lines[0]
		out = append(out, testutil.PyFrame(ln.Function, ln.File, int(ln.Line)))
	}
	return out, first
}

// TestPythonStacks snapshots a real CPython of each version (the threads
// of testdata/python/frames.py, at known places), with and without
// ptrace stops: each thread's stack holds its Python frames in place of
// the interpreter's evaluation frames, equal to what the program's own
// sys._current_frames() says; the thread blocked in os.read shows the
// read below its Python function; spinners waiting for the GIL wait for
// the thread that holds it.
func TestPythonStacks(t *testing.T) {
	testutil.RequirePtrace(t)
	for _, py := range testutil.Pythons {
		for _, noPtrace := range []bool{false, true} {
			name := py.Name
			if noPtrace {
				name += "/no-ptrace"
			}
			t.Run(name, func(t *testing.T) {
				python := testutil.RequireTool(t, py.Path)
				pid, want := testutil.FramesTarget(t, python)
				snap := take(t, pid, Options{NoPtrace: noPtrace})
				gilWaits := 0
				for tid, w := range want {
					th := threadOf(t, snap, tid)
					got, first := pythonFrames(th)
					running := th.State == 'R' && noPtrace
					if running {
						// Not stopped, no user stack: its frames are
						// read alone, and must be the program's.
						if len(got) > 0 && !slices.Equal(got, w.Want()) {
							t.Errorf("tid %d %q (running, no stop):\n got %s\nwant %s", tid, w.Name, strings.Join(got, "\n     "), strings.Join(w.Want(), "\n     "))
						}
						continue
					}
					if !slices.Equal(got, w.Want()) {
						t.Errorf("tid %d %q:\n got %s\nwant %s\nstack %s", tid, w.Name, strings.Join(got, "\n     "), strings.Join(w.Want(), "\n     "), strings.Join(userNames(th), " ← "))
					}
					for _, l := range th.User {
						if isEvalLocation(l) {
							t.Errorf("tid %d %q: %s left in the stack", tid, w.Name, l.Lines[len(l.Lines)-1].Function)
						}
					}
					if w.Name == "reader" || w.Name == "MainThread" {
						// The read, then the Python that called it.
						if first <= 0 || !slices.ContainsFunc(th.User[:first], func(l *model.Location) bool { return strings.Contains(l.Name(), "read") }) {
							t.Errorf("tid %d %q: no read below its Python frames: %s", tid, w.Name, strings.Join(userNames(th), " ← "))
						}
					}
					if th.Wait != nil && th.Wait.Kind == "gil" {
						gilWaits++
						if th.Wait.Owner == tid {
							t.Errorf("tid %d waits for the GIL it holds", tid)
						}
					}
				}
				if !noPtrace && gilWaits == 0 {
					t.Errorf("no thread waits for the GIL among 4 spinning threads")
				}
			})
		}
	}
}

func isEvalLocation(l *model.Location) bool {
	return l.Kind == model.KindNative && len(l.Lines) > 0 && strings.HasPrefix(l.Lines[len(l.Lines)-1].Function, "_PyEval_EvalFrameDefault")
}
