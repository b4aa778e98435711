package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/dsdtest"
	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/notify/alert"
	"github.com/stallwatch/stallwatch/notify/upload"
)

// TestWatchAlertsUploadsHooks: stallwatch watches a real target through a
// stall and its recovery, with alerts to a real DogStatsD socket, uploads
// to a stand-in agent, and both hooks. Each datagram is DogStatsD; the
// upload is the capture, tagged; the hooks ran with the event.
func TestWatchAlertsUploadsHooks(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	dir := t.TempDir()
	beat := filepath.Join(dir, "beat")
	target, ctl := controlledBeater(t, beat, "50ms")
	dsd := dsdtest.ListenUDP(t)
	intake := intaketest.Start(t)
	out := filepath.Join(dir, "out")
	captured, recovered := filepath.Join(dir, "captured.env"), filepath.Join(dir, "recovered.env")
	sw := startWatch(t, "--pid", strconv.Itoa(target.Pid), "--heartbeat-file", beat, "--stall-after", "500ms",
		"--capture-for", "500ms", "--baseline-freq", "0", "--out", out,
		"--statsd", dsd.Addr, "--upload", intake.URL, "--service", "bank", "--env", "test", "--tags", "team:payments",
		"--on-capture", "env > '"+captured+"'", "--on-recover", "env > '"+recovered+"'")
	waitLog(t, sw, "alerts on", 10*time.Second)
	waitLog(t, sw, "uploads on", 10*time.Second)
	waitLog(t, sw, "heartbeat healthy", 20*time.Second)
	if _, err := ctl.Write([]byte("stop\n")); err != nil {
		t.Fatal(err)
	}

	// The stall's event, before its capture is written.
	var stall *dsdtest.Event
	msgs := dsd.Collect(t, 30*time.Second, func(m []dsdtest.Message) bool {
		for _, x := range m {
			if x.Event != nil && x.Event.AlertType == "error" {
				stall = x.Event
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(stall.Title, "bank (pid "+strconv.Itoa(target.Pid)+") stalled: no heartbeat for") {
		t.Errorf("stall title %q", stall.Title)
	}
	for _, want := range []string{"service:bank", "env:test", "team:payments", "pid:" + strconv.Itoa(target.Pid), "process:beater", "trigger:stall"} {
		if !slices.Contains(stall.Tags, want) {
			t.Errorf("stall event tags %v lack %s", stall.Tags, want)
		}
	}
	if !slices.ContainsFunc(msgs, func(m dsdtest.Message) bool {
		return m.Check != nil && m.Check.Name == alert.CheckResponsive && m.Check.Status == 2
	}) {
		t.Errorf("no critical service check with the stall: %+v", msgs)
	}

	// The capture: uploaded, the hook ran with its directory.
	up := intake.Wait(t, 1, 30*time.Second)[0]
	for _, want := range []string{"service:bank", "env:test", "team:payments", "language:native", "trigger:stall",
		"process_id:" + strconv.Itoa(target.Pid), "process:beater"} {
		if !slices.Contains(up.Tags, want) {
			t.Errorf("upload tags %v lack %s", up.Tags, want)
		}
	}
	if up.Profiles["profile.pprof"] == nil || up.Profiles["threads.pprof"] == nil {
		t.Errorf("upload attachments %v", up.Event.Attachments)
	}
	capDir := waitEnv(t, captured, "STALLWATCH_CAPTURE_DIR")
	if !strings.HasPrefix(capDir, out+"/") || waitEnv(t, captured, "STALLWATCH_EVENT") != "capture" ||
		waitEnv(t, captured, "STALLWATCH_PID") != strconv.Itoa(target.Pid) || waitEnv(t, captured, "STALLWATCH_SERVICE") != "bank" {
		t.Errorf("--on-capture environment:\n%s", readFile(t, captured))
	}

	// Recovery: a success event in the stall's thread, the check ok, the
	// hook told the whole stall.
	if _, err := ctl.Write([]byte("resume\n")); err != nil {
		t.Fatal(err)
	}
	dsd.Collect(t, 30*time.Second, func(m []dsdtest.Message) bool {
		return slices.ContainsFunc(m, func(x dsdtest.Message) bool {
			return x.Event != nil && x.Event.AlertType == "success" && x.Event.AggregationKey == stall.AggregationKey
		})
	})
	if s, err := strconv.ParseFloat(waitEnv(t, recovered, "STALLWATCH_STALL_SECONDS"), 64); err != nil || s < 1 {
		t.Errorf("--on-recover STALLWATCH_STALL_SECONDS %v (%v), want the whole stall (beyond the capture's second)", s, err)
	}
	if waitEnv(t, recovered, "STALLWATCH_CAPTURE_DIR") != capDir {
		t.Errorf("--on-recover names another capture:\n%s", readFile(t, recovered))
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGINT)
	if got := exitStatusOf(t, sw, 15*time.Second); got != 0 {
		t.Errorf("exit %d after SIGINT; log:\n%s", got, sw.Stderr())
	}
	if len(intake.Uploads()) != 1 {
		t.Errorf("%d uploads, want 1", len(intake.Uploads()))
	}
}

// TestWatchUploadSurvivesRestart: the agent is down; two captures are
// written and their uploads queued, and --keep 1 spares the older one;
// stallwatch stops; the agent comes up; a new stallwatch on the same
// --out delivers both, each exactly once.
func TestWatchUploadSurvivesRestart(t *testing.T) {
	t.Parallel() // its beater, watch and agent port
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	dir := t.TempDir()
	beat := filepath.Join(dir, "beat")
	target := testutil.Start(t, beaterPath(t), "-file", beat, "-interval", "50ms")
	target.WaitLine(t, "ready", 10*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	agent := ln.Addr().String()
	ln.Close() // nothing listens: the agent is down
	out := filepath.Join(dir, "out")
	args := []string{"--pid", strconv.Itoa(target.Pid), "--heartbeat-file", beat, "--capture-for", "300ms",
		"--baseline-freq", "0", "--out", out, "--keep", "1", "--upload", "http://" + agent, "--statsd", "off"}

	sw := startWatch(t, args...)
	waitLog(t, sw, "heartbeat healthy", 20*time.Second)
	for i := 1; i <= 2; i++ {
		if err := sw.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		if err := testutil.Eventually(20*time.Second, func() bool { return strings.Count(sw.Stderr(), "capture written") == i }); err != nil {
			t.Fatalf("capture %d not written; log:\n%s", i, sw.Stderr())
		}
	}
	waitLog(t, sw, "the agent cannot be reached; the uploads stay queued", 20*time.Second) // nothing listens
	waitLog(t, sw, "old captures kept past --keep: their upload is pending", 20*time.Second)
	_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
	if got := exitStatusOf(t, sw, 20*time.Second); got != 0 {
		t.Fatalf("exit %d; log:\n%s", got, sw.Stderr())
	}
	if !strings.Contains(sw.Stderr(), "uploads still queued") {
		t.Errorf("stallwatch did not say uploads are left queued:\n%s", sw.Stderr())
	}
	queue := filepath.Join(out, notify.QueueDirName)
	if n := queuedEntries(t, queue); n != 2 {
		t.Fatalf("%d uploads queued on disk, want 2", n)
	}
	captures, _ := filepath.Glob(filepath.Join(out, "*-signal*"))
	if len(captures) != 2 {
		t.Fatalf("captures on disk %v: --keep 1 removed one whose upload was pending", captures)
	}

	intake := intaketest.StartAt(t, agent)
	sw = startWatch(t, args...)
	got := intake.Wait(t, 2, 30*time.Second)
	if err := testutil.Eventually(10*time.Second, func() bool { return queuedEntries(t, queue) == 0 }); err != nil {
		t.Errorf("%d entries left in the queue after delivery", queuedEntries(t, queue))
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
	exitStatusOf(t, sw, 20*time.Second)
	if n := len(intake.Uploads()); n != 2 {
		t.Fatalf("%d uploads after the restart, want exactly 2", n)
	}
	pids := map[string]int{}
	for _, u := range got {
		v, _ := u.Tag("trigger")
		pids[v]++
	}
	if pids["signal"] != 2 {
		t.Errorf("uploads' triggers %v", pids)
	}
}

// TestUploadCommand: stallwatch upload sends captures taken earlier, with
// the agent from DD_TRACE_AGENT_URL; one that cannot be sent exits 1
// naming it.
func TestUploadCommand(t *testing.T) {
	intake := intaketest.StartUnix(t)
	root := t.TempDir()
	dir := intaketest.WriteCapture(t, root, testCaptureInfo(), nil, nil)
	cmd := exec.Command(stallwatchBin(t), "upload", "--service", "bank", dir)
	cmd.Env = append(os.Environ(), "DD_TRACE_AGENT_URL="+intake.URL, "DD_ENV=staging")
	outb, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("upload: %v\n%s", err, outb)
	}
	if !strings.Contains(string(outb), "uploaded "+dir) {
		t.Errorf("output %q", outb)
	}
	up := intake.Wait(t, 1, 10*time.Second)[0]
	if v, _ := up.Tag("service"); v != "bank" {
		t.Errorf("tags %v", up.Tags)
	}
	if v, _ := up.Tag("env"); v != "staging" {
		t.Errorf("DD_ENV did not fill --env: %v", up.Tags)
	}

	missing := filepath.Join(root, "not-a-capture")
	cmd = exec.Command(stallwatchBin(t), "upload", "--upload", intake.URL, dir, missing)
	outb, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("one missing capture: %v\n%s", err, outb)
	}
	if !strings.Contains(string(outb), missing) || !strings.Contains(string(outb), "1 of 2 captures not uploaded") {
		t.Errorf("output does not name what failed:\n%s", outb)
	}
	if _, err := os.Stat(upload.DefaultSocket); err == nil {
		return // an agent is here: "no agent" cannot be tested
	}
	cmd = exec.Command(stallwatchBin(t), "upload", dir)
	cmd.Env = withoutDD(os.Environ())
	outb, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(outb), "--upload") {
		t.Errorf("no agent configured: %v\n%s", err, outb)
	}
}

// TestRecordUpload: record with --upload sends its capture.
func TestRecordUpload(t *testing.T) {
	testutil.RequirePerf(t)
	target := testutil.Start(t, beaterPath(t), "-interval", "10ms", "-spin")
	target.WaitLine(t, "ready", 10*time.Second)
	intake := intaketest.Start(t)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(stallwatchBin(t), "record", "-p", strconv.Itoa(target.Pid), "--duration", "500ms",
		"--out", out, "--upload", intake.URL, "--quiet")
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	dir := strings.TrimSpace(string(outb))
	up := intake.Wait(t, 1, 10*time.Second)[0]
	if v, _ := up.Tag("trigger"); v != "manual" {
		t.Errorf("tags %v", up.Tags)
	}
	if prof := up.Profiles["profile.pprof"]; prof == nil || len(prof.Sample) == 0 {
		t.Errorf("the uploaded profile has no samples")
	}
	if n := queuedEntries(t, filepath.Join(out, notify.QueueDirName)); n != 0 {
		t.Errorf("%d uploads left queued after %s was sent", n, dir)
	}
}

func queuedEntries(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

func readFile(t *testing.T, path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// waitEnv waits for a hook's `env` output and returns the variable.
func waitEnv(t *testing.T, path, name string) string {
	t.Helper()
	var val string
	if err := testutil.Eventually(30*time.Second, func() bool {
		for _, line := range strings.Split(readFile(t, path), "\n") {
			if v, ok := strings.CutPrefix(line, name+"="); ok {
				val = v
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("%s has no %s:\n%s", path, name, readFile(t, path))
	}
	return val
}

func withoutDD(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "DD_") })
}

// testCaptureInfo is capture.json of a capture taken a second ago.
func testCaptureInfo() model.Info {
	now := time.Now()
	info := capdir.NewInfo(model.Target{PID: 4242, Executable: "/usr/bin/julia"}, model.Trigger{Kind: model.Stall, At: now, StallFor: 10 * time.Second})
	info.Start, info.End = now.Add(-time.Second), now
	return info
}

// TestProcessTagSame: a process started as python3 runs /usr/bin/python3.11
// (a link): its comm is python3, its executable python3.11. DogStatsD
// events and uploads give it one process tag (they said python3 and
// python3.11).
func TestProcessTagSame(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	py := "/usr/bin/python3" // Debian's: a link to python3.11
	exe, err := filepath.EvalSymlinks(py)
	if err != nil || filepath.Base(exe) == "python3" {
		testutil.Skip(t, "python3 (%s → %s, %v) is not a link to a versioned executable", py, exe, err)
	}
	tg := testutil.StartCmd(t, exec.Command(py, "-c", "import time; print('ready', flush=True); time.sleep(600)"))
	tg.WaitLine(t, "ready", 20*time.Second)
	dsd := dsdtest.ListenUDP(t)
	intake := intaketest.Start(t)
	sw := startWatch(t, "--pid", strconv.Itoa(tg.Pid), "--heartbeat-proc", "--stall-after", "1h", "--capture-for", "200ms",
		"--baseline-freq", "0", "--out", filepath.Join(t.TempDir(), "out"), "--statsd", dsd.Addr, "--upload", intake.URL)
	waitLog(t, sw, "heartbeat healthy", 20*time.Second)
	_ = sw.Cmd.Process.Signal(syscall.SIGUSR1)
	var ev *dsdtest.Event
	dsd.Collect(t, 30*time.Second, func(m []dsdtest.Message) bool {
		for _, x := range m {
			if x.Event != nil && strings.Contains(x.Event.Title, "capture written") {
				ev = x.Event
				return true
			}
		}
		return false
	})
	up := intake.Wait(t, 1, 30*time.Second)[0]
	want := "process:" + filepath.Base(exe)
	if !slices.Contains(ev.Tags, want) || !slices.Contains(up.Tags, want) {
		t.Errorf("want %s on both: event tags %v, upload tags %v", want, ev.Tags, up.Tags)
	}
}
