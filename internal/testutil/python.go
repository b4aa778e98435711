package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Python is one CPython build on this machine kind.
type Python struct {
	Name, Path string
	Minor      int
}

// Pythons are the CPython builds the tests of runtimes read: Debian's
// python3 (3.11, a static build stripped of its local symbols) and
// pyenv's 3.8–3.13 (shared libpython, with symbols).
var Pythons = []Python{
	{"debian-3.11", "/usr/bin/python3", 11},
	{"3.8", "/root/.pyenv/versions/3.8.18/bin/python3", 8},
	{"3.9", "/root/.pyenv/versions/3.9.18/bin/python3", 9},
	{"3.10", "/root/.pyenv/versions/3.10.13/bin/python3", 10},
	{"3.11", "/root/.pyenv/versions/3.11.7/bin/python3", 11},
	{"3.12", "/root/.pyenv/versions/3.12.1/bin/python3", 12},
	{"3.13", "/root/.pyenv/versions/3.13.0/bin/python3", 13},
}

// PyThread is one thread of testdata/python/frames.py as its own
// sys._current_frames() saw it.
type PyThread struct {
	Name   string  `json:"name"`
	Frames [][]any `json:"frames"`
}

// Want is the thread's frames, innermost first, as "name file:line".
func (t PyThread) Want() []string {
	var out []string
	for _, f := range t.Frames {
		out = append(out, PyFrame(f[0].(string), f[1].(string), int(f[2].(float64))))
	}
	return out
}

// PyFrame is a Python frame as the tests compare them: "name file:line".
func PyFrame(name, file string, line int) string { return fmt.Sprintf("%s %s:%d", name, file, line) }

// FramesTarget runs testdata/python/frames.py under python (threads at
// known Python frames) and returns its pid and what it says of its
// threads, by kernel tid, once only those threads are left.
func FramesTarget(t testing.TB, python string, args ...string) (int, map[int]PyThread) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "frames.json")
	tg := Start(t, python, append([]string{Testdata(t, "python", "frames.py"), out}, args...)...)
	tg.WaitLine(t, "ready", 60*time.Second)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]PyThread
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	want := map[int]PyThread{}
	for k, v := range raw {
		tid, _ := strconv.Atoi(k)
		want[tid] = v
	}
	// The threads that wrote the file and printed "ready" are on their
	// way out.
	err = Eventually(60*time.Second, func() bool {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", tg.Pid))
		return err == nil && len(tasks) == len(want)
	})
	if err != nil {
		t.Fatalf("the target's threads did not come down to the %d it described", len(want))
	}
	return tg.Pid, want
}
