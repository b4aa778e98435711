package snapshot

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/symbolize"
)

// TestDeepStackMatchesGdb: a thread 500 calls deep (gdb shows 507 frames),
// and one 200 levels of 512-byte frames deep (110 KiB of stack), are
// read whole, frame for frame as gdb finds them, and end at the thread's
// first function without a cut: asleep, without a stop; with NoPtrace;
// and under a stop (the wide stack does not fit the 16 KiB copy walked
// after the stop: the thread is stopped again and walked under the stop).
func TestDeepStackMatchesGdb(t *testing.T) {
	testutil.RequirePtrace(t)
	gcc := testutil.RequireTool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "deep")
	if out, err := exec.Command(gcc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(t, "deep", "deep.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name      string
		args      []string
		minFrames int
	}{{"narrow", nil, 500}, {"wide", []string{"-wide", "-depth", "200"}, 400}} {
		t.Run(c.name, func(t *testing.T) {
			tg := testutil.Start(t, bin, c.args...)
			tid, _ := strconv.Atoi(strings.TrimPrefix(tg.WaitLine(t, "ready ", 10*time.Second), "ready "))
			waitBlocked(t, tg.Pid, tid, 0) // read
			gdb := testutil.Real(testutil.GDBStacks(t, tg.Pid)[tid])
			if len(gdb) < c.minFrames {
				t.Fatalf("gdb found %d frames", len(gdb))
			}
			for _, opts := range []Options{{}, {NoPtrace: true}, {stopSleepers: true}} {
				how := fmt.Sprintf("no ptrace %v, stop sleepers %v", opts.NoPtrace, opts.stopSleepers)
				th := threadOf(t, take(t, tg.Pid, opts), tid)
				if th.Stopped != opts.stopSleepers {
					t.Errorf("%s: stopped %v", how, th.Stopped)
				}
				if th.UserCut.Truncated() {
					t.Errorf("%s: the stack was cut: %v", how, th.UserCut)
				}
				if len(th.UserAddrs) != len(gdb) {
					t.Errorf("%s: %d frames, gdb has %d", how, len(th.UserAddrs), len(gdb))
				}
				for i := range min(len(th.UserAddrs), len(gdb)) {
					if th.UserAddrs[i] != gdb[i].PC {
						t.Errorf("%s: frame %d is %#x, gdb says %#x (%s)", how, i, th.UserAddrs[i], gdb[i].PC, gdb[i].Name)
						break
					}
				}
			}
			assertReleased(t, tg.Pid)
		})
	}
}

// TestDeeperThanLimit: a thread 1,100 calls deep is read to the
// snapshot's limit of 1,024 frames, and its stack says it was cut there
// (the last frame "[truncated: deeper than 1024 frames]"), under a stop
// and without one.
func TestDeeperThanLimit(t *testing.T) {
	testutil.RequirePtrace(t)
	gcc := testutil.RequireTool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "deep")
	if out, err := exec.Command(gcc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(t, "deep", "deep.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	tg := testutil.Start(t, bin, "-depth", "1100")
	tid, _ := strconv.Atoi(strings.TrimPrefix(tg.WaitLine(t, "ready ", 10*time.Second), "ready "))
	waitBlocked(t, tg.Pid, tid, 0) // read
	for _, noPtrace := range []bool{false, true} {
		th := threadOf(t, take(t, tg.Pid, Options{NoPtrace: noPtrace}), tid)
		want := unwind.Cut{Reason: unwind.TooDeep, Limit: 1024}
		if th.UserCut != want || len(th.UserAddrs) != 1024 {
			t.Errorf("no ptrace %v: %d frames, cut %v; want 1024 frames, cut %v", noPtrace, len(th.UserAddrs), th.UserCut, want)
		}
		names := userNames(th)
		if last := names[len(names)-1]; last != "[truncated: deeper than 1024 frames]" {
			t.Errorf("no ptrace %v: the stack ends with %q, not with why it was cut", noPtrace, last)
		}
	}
	assertReleased(t, tg.Pid)
}

// TestCPlusPlusNamesMatchGdb: the frames of C++ code that g++ -O2 inlined
// (a class template's member, a namespace's static function) are named as
// gdb prints them: full scope, template arguments, no parameters or
// return type, one frame per inlined call.
func TestCPlusPlusNamesMatchGdb(t *testing.T) {
	testutil.RequirePtrace(t)
	gxx := testutil.RequireTool(t, "g++")
	bin := filepath.Join(t.TempDir(), "cppinline")
	if out, err := exec.Command(gxx, "-O2", "-g", "-pthread", "-o", bin, testutil.Testdata(t, "cppinline", "cppinline.cpp")).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	tg := testutil.Start(t, bin)
	tid, _ := strconv.Atoi(strings.TrimPrefix(tg.WaitLine(t, "ready ", 10*time.Second), "ready "))
	waitBlocked(t, tg.Pid, tid, 0) // read
	var want []string
	for _, f := range testutil.GDBStacks(t, tg.Pid)[tid] {
		if strings.HasSuffix(f.File, "cppinline.cpp") {
			want = append(want, f.Name)
		}
	}
	if len(want) < 3 {
		t.Fatalf("gdb names %d frames of the program: %q", len(want), want)
	}
	th := threadOf(t, take(t, tg.Pid, Options{}), tid)
	var got []string
	for _, l := range th.User {
		if l.Mapping == nil || l.Mapping.File != bin {
			continue
		}
		for _, ln := range l.Lines {
			got = append(got, ln.Function)
		}
	}
	if strings.Join(got, " ← ") != strings.Join(want, " ← ") {
		t.Errorf("the program's frames:\n ours %q\n  gdb %q", got, want)
	}
	if th.UserCut.Truncated() || len(th.User) == 0 || !symbolize.Outermost(th.User[len(th.User)-1]) {
		t.Errorf("the stack does not reach the thread's first function: %v, cut %v", userNames(th), th.UserCut)
	}
	assertReleased(t, tg.Pid)
}
