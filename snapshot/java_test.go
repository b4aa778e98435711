package snapshot

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes/hotspot"
	"github.com/stallwatch/stallwatch/target"
)

// javaFrames are the Java frames of a thread's user stack, as
// "method (file:line)".
func javaFrames(t *model.Thread) []string {
	var out []string
	for _, l := range t.User {
		if l != nil && l.Mapping != nil && l.Mapping.File == model.JavaMapping {
			ln := l.Lines[0]
			s := ln.Function
			if ln.File != "" && ln.Line > 0 {
				s += " (" + ln.File + ":" + strconv.FormatInt(ln.Line, 10) + ")"
			}
			out = append(out, s)
		}
	}
	return out
}

// jstackFrames are jstack's frames of one thread, spelt as javaFrames.
func jstackFrames(jt *hotspot.JavaThread) []string {
	var out []string
	for _, f := range jt.Frames {
		s := f.Method.String()
		if f.Method.File != "" && f.Line > 0 {
			s += " (" + f.Method.File + ":" + strconv.Itoa(f.Line) + ")"
		}
		out = append(out, s)
	}
	return out
}

func jstackDump(t *testing.T, pid int) *hotspot.Java {
	t.Helper()
	out, err := exec.Command(testutil.RequireTool(t, "jstack"), "-l", strconv.Itoa(pid)).Output()
	if err != nil {
		t.Fatalf("jstack: %v", err)
	}
	return hotspot.ParseThreadDump(out)
}

func takeJava(t *testing.T, pid int) *model.Snapshot {
	t.Helper()
	tp, err := target.Open(pid, target.Options{Kernel: true, JIT: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	snap, err := Take(context.Background(), pid, Options{Target: tp})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestJavaDeadlocks: a JVM started with no flag, its threads deadlocked on
// synchronized monitors or on ReentrantLocks: the snapshot names its Java
// threads as jstack does, puts their Java frames (jstack's, line for
// line) in their native stacks, and its lock graph has the deadlock
// jstack finds, between the same threads.
func TestJavaDeadlocks(t *testing.T) {
	testutil.RequirePtrace(t)
	for _, mode := range []string{"deadlock", "lockdeadlock"} {
		t.Run(mode, func(t *testing.T) {
			tg := testutil.StartJava(t, nil, mode)
			dump := jstackDump(t, tg.Pid)
			snap := takeJava(t, tg.Pid)
			byTID := snap.ByTID()
			for i := range dump.Threads {
				jt := &dump.Threads[i]
				if jt.JavaID == 0 {
					continue
				}
				th := byTID[jt.TID]
				if th == nil || th.Name != jt.Name {
					t.Errorf("jstack's %q (tid %d): the snapshot's %+v", jt.Name, jt.TID, th)
					continue
				}
				if g, w := javaFrames(th), jstackFrames(jt); !slices.Equal(g, w) {
					t.Errorf("%q: the snapshot's Java frames\n\t%s\njstack's\n\t%s", jt.Name, strings.Join(g, "\n\t"), strings.Join(w, "\n\t"))
				}
			}
			if len(dump.Deadlocks) != 1 || len(snap.Locks.Cycles) != 1 {
				t.Fatalf("deadlocks: jstack %+v, the snapshot's cycles %v", dump.Deadlocks, snap.Locks.Cycles)
			}
			var want []int
			for _, l := range dump.Deadlocks[0].Links {
				want = append(want, l.TID)
			}
			got := slices.Clone(snap.Locks.Cycles[0])
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("the snapshot's cycle %v, jstack's %v", got, want)
			}
			for _, tid := range got {
				if w := byTID[tid].Wait; w == nil || !strings.HasPrefix(w.Kind, "java ") {
					t.Errorf("tid %d waits for %+v", tid, w)
				}
			}
		})
	}
}

// TestJavaSafepoint: a JVM held at a safepoint by a thread in a loop
// without polls (jstack gets no answer from it): the VM Thread waits for
// that thread, named with the Java method it runs, read from its
// registers at its stop.
func TestJavaSafepoint(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := testutil.StartJava(t, []string{"-XX:-UseCountedLoopSafepoints"}, "safepoint")
	var snap *model.Snapshot
	// The safepoint holds once gc-1 asked for its collection.
	err := testutil.Eventually(30*time.Second, func() bool {
		snap = takeJava(t, tg.Pid)
		for _, th := range snap.Threads {
			if th.Name == "VM Thread" && th.Wait != nil && th.Wait.Kind == "safepoint" {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("the VM Thread never waits for the safepoint; notes %q", snap.Notes)
	}
	byTID := snap.ByTID()
	var vmThread *model.Thread
	for i := range snap.Threads {
		if snap.Threads[i].Name == "VM Thread" {
			vmThread = &snap.Threads[i]
		}
	}
	spinner := byTID[vmThread.Wait.Owner]
	if spinner == nil || spinner.Name != "spinner-1" {
		t.Fatalf("the VM Thread waits for %+v, want spinner-1", spinner)
	}
	if fs := javaFrames(spinner); len(fs) == 0 || !strings.HasPrefix(fs[0], "Spinner.spin") {
		t.Errorf("spinner-1's Java frames %q, want Spinner.spin on top", fs)
	}
	if !strings.Contains(vmThread.Wait.Desc, "G1CollectFull") || !strings.Contains(vmThread.Wait.Desc, "Spinner.spin") {
		t.Errorf("the VM Thread's wait: %q", vmThread.Wait.Desc)
	}
}
