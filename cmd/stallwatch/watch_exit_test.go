package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestWatchTargetExitedSame: a target that exits during a capture is
// target_exited, cut short because it exited, whether stallwatch started
// it (-- CMD: its child, a zombie until reaped) or was given its pid.
func TestWatchTargetExitedSame(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	for _, mode := range []string{"child", "pid"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			beat, out := filepath.Join(dir, "beat"), filepath.Join(dir, "out")
			flags := []string{"--heartbeat-file", beat, "--stall-after", "300ms", "--capture-for", "1m", "--history", "1s", "--out", out}
			beaterArgs := []string{"-file", beat, "-interval", "20ms"}
			var control io.Writer
			var sw *testutil.Target
			if mode == "child" {
				cmd := exec.Command(stallwatchBin(t), append(append([]string{"watch"}, flags...), append([]string{"--", beaterPath(t)}, beaterArgs...)...)...)
				in, err := cmd.StdinPipe() // the child's stdin is stallwatch's
				if err != nil {
					t.Fatal(err)
				}
				control, sw = in, testutil.StartCmd(t, cmd)
			} else {
				cmd := exec.Command(beaterPath(t), beaterArgs...)
				in, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				target := testutil.StartCmd(t, cmd)
				target.WaitLine(t, "ready", 10*time.Second)
				control = in
				sw = startWatch(t, append(flags, "--pid", strconv.Itoa(target.Pid))...)
			}
			waitLog(t, sw, "heartbeat healthy", 30*time.Second)
			fmt.Fprintln(control, "stop")
			waitLog(t, sw, "capture started", 10*time.Second)
			fmt.Fprintln(control, "exit 0")
			// -- CMD: the child's status; --pid: 4, the watched
			// process exited.
			want := 0
			if mode == "pid" {
				want = exitTargetExited
			}
			if got := exitStatusOf(t, sw, 20*time.Second); got != want {
				t.Errorf("exit %d, want %d; log:\n%s", got, want, sw.Stderr())
			}
			info := captureJSON(t, out, "stall")
			if info["target_exited"] != true || info["cut_short"] != true || info["cut_short_why"] != "the target exited" {
				t.Errorf("target_exited %v, cut_short %v (%v); want true, true (the target exited); log:\n%s",
					info["target_exited"], info["cut_short"], info["cut_short_why"], sw.Stderr())
			}
		})
	}
}

// TestWatchSIGUSR1Burst: 30 SIGUSR1 make one capture, and one more for
// those that came during it; the log says so once, not 30 times.
func TestWatchSIGUSR1Burst(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	dir := t.TempDir()
	beat, out := filepath.Join(dir, "beat"), filepath.Join(dir, "out")
	target := testutil.Start(t, beaterPath(t), "-file", beat, "-interval", "50ms")
	target.WaitLine(t, "ready", 10*time.Second)
	sw := startWatch(t, "--pid", strconv.Itoa(target.Pid), "--heartbeat-file", beat, "--capture-for", "1s",
		"--baseline-freq", "0", "--out", out, "--log-format", "json")
	waitLog(t, sw, `"msg":"heartbeat healthy"`, 30*time.Second)
	for range 30 {
		if err := sw.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	waitLog(t, sw, `"msg":"capture written"`, 30*time.Second)
	// If some requests came during the first capture, their one capture
	// follows it.
	if strings.Contains(sw.Stderr(), "capture requests arrived during the capture") {
		if err := testutil.Eventually(30*time.Second, func() bool { return strings.Count(sw.Stderr(), `"msg":"capture written"`) == 2 }); err != nil {
			t.Fatalf("the follow-up capture was not written; log:\n%s", sw.Stderr())
		}
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGINT)
	if got := exitStatusOf(t, sw, 10*time.Second); got != 0 {
		t.Errorf("exit %d", got)
	}
	dirs, _ := filepath.Glob(filepath.Join(out, "*-signal"))
	started := strings.Count(sw.Stderr(), `"msg":"capture started"`)
	if len(dirs) < 1 || len(dirs) > 2 || started != len(dirs) {
		t.Errorf("%d captures, %d 'capture started' lines for 30 signals; want 1 or 2 of each; log:\n%s", len(dirs), started, sw.Stderr())
	}
	merged := 0
	for _, line := range strings.Split(sw.Stderr(), "\n") {
		if strings.Contains(line, "requests") && strings.Contains(line, "capture") {
			merged++
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("%q: %v", line, err)
			}
		}
	}
	if merged > 3 {
		t.Errorf("%d lines about merged requests; log:\n%s", merged, sw.Stderr())
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
}

// TestWatchCommandNotRunnable: watch -- CMD answers as a shell does when
// CMD cannot run: 127 when there is none, 126 when it is not executable,
// with one line naming it.
func TestWatchCommandNotRunnable(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	noExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  string
		want int
	}{{"/nonexistent", 127}, {"stallwatch-no-such-command", 127}, {noExec, 126}} {
		cmd := exec.Command(stallwatchBin(t), "watch", "--heartbeat-proc", "--out", filepath.Join(dir, "out"), "--", tc.cmd)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != tc.want {
			t.Errorf("watch -- %s: %v, want exit %d; stderr:\n%s", tc.cmd, err, tc.want, stderr.String())
		}
		if !strings.Contains(stderr.String(), "cannot run "+tc.cmd) || strings.Count(stderr.String(), tc.cmd) != 1 {
			t.Errorf("watch -- %s: stderr does not name it once:\n%s", tc.cmd, stderr.String())
		}
	}
}

// TestWatchLogSaysEachThingOnce: the log a user reads says each thing
// once and only when true: a capture not cut short has no why="", a
// target's exit is one "target exited" line, and a SIGINT with no
// capture running says nothing of finishing one.
func TestWatchLogSaysEachThingOnce(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	t.Run("child", func(t *testing.T) {
		dir := t.TempDir()
		beat := filepath.Join(dir, "beat")
		cmd := exec.Command(stallwatchBin(t), append(append([]string{"watch"}, quiet(beat)...),
			"--stall-after", "300ms", "--capture-for", "300ms", "--", beaterPath(t), "-file", beat, "-interval", "20ms")...)
		control, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		sw := testutil.StartCmd(t, cmd)
		waitLog(t, sw, "heartbeat healthy", 30*time.Second)
		fmt.Fprintln(control, "stop")
		waitLog(t, sw, "capture written", 30*time.Second)
		fmt.Fprintln(control, "exit 0")
		if got := exitStatusOf(t, sw, 20*time.Second); got != 0 {
			t.Errorf("exit %d, want the child's 0; log:\n%s", got, sw.Stderr())
		}
		log := sw.Stderr()
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, `msg="capture written"`) && strings.Contains(line, "cut_short=false") && strings.Contains(line, "why=") {
				t.Errorf("a capture not cut short has a why: %s", line)
			}
		}
		if n := strings.Count(log, `msg="target exited"`); n != 1 {
			t.Errorf(`%d "target exited" lines, want 1; log:\n%s`, n, log)
		}
	})
	t.Run("SIGINT without a capture", func(t *testing.T) {
		dir := t.TempDir()
		beat := filepath.Join(dir, "beat")
		target, _ := controlledBeater(t, beat, "20ms")
		sw := startWatch(t, append(quiet(beat), "--pid", strconv.Itoa(target.Pid))...)
		waitLog(t, sw, "heartbeat healthy", 30*time.Second)
		_ = sw.Cmd.Process.Signal(syscall.SIGINT)
		if got := exitStatusOf(t, sw, 20*time.Second); got != 0 {
			t.Errorf("exit %d after SIGINT, want 0; log:\n%s", got, sw.Stderr())
		}
		if log := sw.Stderr(); strings.Contains(log, "capture in progress") || !strings.Contains(log, "watchdog stopping") {
			t.Errorf("a SIGINT with no capture running speaks of one (or stopping was not said):\n%s", log)
		}
	})
}

// TestWatchHeartbeatPathOfTheChild: {pid} in --heartbeat-file is the
// target's pid, here a child's that nobody knew before it started, as in
// the daemon's rules; watch --help says so.
func TestWatchHeartbeatPathOfTheChild(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	sw := startWatch(t, "--heartbeat-file", filepath.Join(dir, "{pid}.beat"), "--baseline-freq", "0", "--out", filepath.Join(dir, "out"),
		"--", "/bin/sh", "-c", `while :; do touch "$0/$$.beat"; sleep 0.05; done`, dir)
	waitLog(t, sw, "heartbeat healthy", 30*time.Second)
	m := startedPid.FindStringSubmatch(sw.Stderr())
	if m == nil || !strings.Contains(sw.Stderr(), filepath.Join(dir, m[1]+".beat")) {
		t.Errorf("the heartbeat is not the child's file; log:\n%s", sw.Stderr())
	}
	var stdout, stderr strings.Builder
	help := exec.Command(stallwatchBin(t), "watch", "--help")
	help.Stdout, help.Stderr = &stdout, &stderr
	if err := help.Run(); err != nil || !strings.Contains(stdout.String(), "{pid} is the target's pid") || !strings.Contains(stdout.String(), "{root}") {
		t.Errorf("watch --help does not document {pid} and {root} (%v):\n%s", err, stdout.String())
	}
}
