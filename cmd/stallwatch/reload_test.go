package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestDaemonReloadDuringCapture: SIGHUP changes the rule of a 300-thread
// target while its capture runs. The daemon answers at once (its loop
// does not wait for the capture), the capture is cut short and written,
// and the target is watched again under the new rule.
func TestDaemonReloadDuringCapture(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, testutil.BuildC(t, "manythreads/manythreads.c"), "300", "1")
	tg.WaitLine(t, "ready", 60*time.Second)
	pidfile := filepath.Join(t.TempDir(), "many.pid")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(tg.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	config := func(stallAfter string) string {
		return "out: OUT\nrules:\n  - name: many\n    match: {pidfile: " + pidfile + "}\n    heartbeat-proc: true\n    stall-after: " + stallAfter + "\n    capture-for: 30s\n"
	}
	e := newDaemonEnv(t, config("2s"))
	e.start(t)
	e.waitTarget(t, tg.Pid, "healthy", 30*time.Second, healthy)
	// Frozen: a stall, and its capture.
	if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(tg.Pid, syscall.SIGCONT)
	waitLog(t, e.sw, `msg="capture started"`, 30*time.Second)
	e.write(t, config("3s"))
	sighup := time.Now()
	if err := e.sw.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, e.sw, "configuration reloaded", 30*time.Second)
	t.Logf("SIGHUP to reloaded: %v", time.Since(sighup))
	// The capture, cut short, is written — after the reload was done: the
	// daemon's loop did not wait for it.
	waitLog(t, e.sw, `msg="capture written"`, 60*time.Second)
	log := e.sw.Stderr()
	if strings.Index(log, `msg="capture written"`) < strings.Index(log, "configuration reloaded") {
		t.Errorf("the reload waited for the capture in progress; log:\n%s", log)
	}
	if !strings.Contains(log, "cut_short=true") || len(captureDirs(t, e.out, tg.Pid, "stall")) != 1 {
		t.Errorf("no capture cut short by the reload on disk; log:\n%s", log)
	}
	// Watched again, under the new rule.
	e.waitTarget(t, tg.Pid, "watched again", 60*time.Second, watched)
}
