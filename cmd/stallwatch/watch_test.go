package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// builtOnce builds a program once per test binary, in a directory of its
// own (tests of several packages may run at once).
type builtOnce struct {
	sync.Once
	path string
	err  error
	out  []byte
}

var watchBin, beaterBin builtOnce

func (b *builtOnce) build(t testing.TB, name, dir string) string {
	t.Helper()
	testutil.EndToEnd(t)
	b.Do(func() {
		tmp, err := buildTemp("stallwatch-watch-test-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(tmp, name)
		cmd := exec.Command("go", "build", "-o", b.path, ".")
		cmd.Dir = dir
		// Static, as the container recipe builds stallwatch
		// (deploy/kubernetes/Dockerfile).
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("go build %s: %v\n%s", name, b.err, b.out)
	}
	return b.path
}

func stallwatchBin(t testing.TB) string { return watchBin.build(t, "stallwatch", ".") }
func beaterPath(t *testing.T) string {
	return beaterBin.build(t, "beater", testutil.Testdata(t, "beater"))
}

// controlledBeater starts a beater that beats file every interval and
// stops and resumes on the commands written to control ("stop\n",
// "resume\n"); it returns once the beater is ready.
func controlledBeater(t *testing.T, file, interval string) (target *testutil.Target, control io.Writer) {
	t.Helper()
	cmd := exec.Command(beaterPath(t), "-file", file, "-interval", interval)
	control, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	target = testutil.StartCmd(t, cmd)
	target.WaitLine(t, "ready", 10*time.Second)
	return target, control
}

func TestWatchUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--heartbeat-proc"}, "--pid PID or -- CMD"},
		{[]string{"--pid", "1"}, "no heartbeat"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--", "true"}, "exclude each other"},
		{[]string{"--pid", "-3", "--heartbeat-proc"}, "not a process id"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--stall-after", "0s"}, "--stall-after"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--log-format", "xml"}, "--log-format"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--metric", "a.*"}, "go with --heartbeat-tap or --heartbeat-statsd"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--http-timeout", "1s"}, "go with --heartbeat-http"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--max-captures", "-1"}, "cannot be negative"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--freq", "0"}, "--freq"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--stack-copy", "100"}, "--stack-copy 100: must be auto, or between 256 and 61440 bytes"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--stack-copy", "0"}, "--stack-copy 0: must be auto, or between 256"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--stack-copy", "lots"}, `"lots": want auto, or a size such as 16KiB or 32KiB`},
		{[]string{"--pid", "1", "--heartbeat-file", ""}, "--heartbeat-file: an empty path"},
		{[]string{"--pid", "1", "--heartbeat-proc", "--capture-for", "100000h"}, "--capture-for 100000h0m0s: must be positive and at most 10m0s"},
		{[]string{"--pid", "1", "--no-such-flag"}, "no-such-flag"},
		{[]string{"--pid", "1", "--heartbeat-http", "localhost:8080/health"}, "--heartbeat-http: \"localhost:8080/health\" is not an http:// or https:// URL (write it whole: http://localhost:8080/health)"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"watch"}, tc.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (usage); stderr:\n%s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestWatchRefusesSetupErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"watch", "--pid", "999999999", "--heartbeat-proc"}, &stdout, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "no process 999999999") {
		t.Errorf("missing pid: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	code := run([]string{"watch", "--pid", strconv.Itoa(os.Getpid()), "--heartbeat-statsd", "udp://127.0.0.1:18125", "--forward", "udp://localhost:18125"}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "forever") {
		t.Errorf("forward loop: exit %d, stderr %q", code, stderr.String())
	}
}

func TestWatchHelpTeaches(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"watch", "--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help exit %d", code)
	}
	if stderr.Len() > 0 {
		t.Errorf("help asked for went to stderr:\n%s", stderr.String())
	}
	help := stdout.String()
	for _, want := range []string{
		"stallwatch watch --heartbeat-file ", "stallwatch watch --heartbeat-statsd ",
		"stallwatch watch --heartbeat-http ", "stallwatch watch --heartbeat-proc ",
		"SIGUSR1", "DD_DOGSTATSD_URL", "-p, --pid PID", "--stall-after DUR", "--recapture-after DUR", "--max-captures N",
		"--capture-for DUR", "--baseline-freq HZ", "--history DUR", "--no-offcpu", "--no-kernel", "--no-ptrace", "--keep N", "--out DIR",
		"--metric-tag K:V", "--forward ADDR", "--http-timeout DUR", "--log-format FORMAT",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func hb(h heartbeatFlags) watchFlags { return watchFlags{rule: ruleFlags{heartbeat: h}} }

func TestWatchDatadogEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		flags   watchFlags
		forward string
	}{
		{"nothing", nil, hb(heartbeatFlags{statsdAddr: "udp://:18125"}), ""},
		{"dogstatsd url", map[string]string{"DD_DOGSTATSD_URL": "unix:///var/run/datadog/dsd.socket", "DD_AGENT_HOST": "agent"},
			hb(heartbeatFlags{statsdAddr: "udp://:18125"}), "unix:///var/run/datadog/dsd.socket"},
		{"agent host", map[string]string{"DD_AGENT_HOST": "10.0.0.7"}, hb(heartbeatFlags{statsdAddr: "udp://:18125"}), "10.0.0.7:8125"},
		{"agent port", map[string]string{"DD_AGENT_HOST": "agent", "DD_DOGSTATSD_PORT": "9125"}, hb(heartbeatFlags{statsdAddr: "udp://:18125"}), "agent:9125"},
		{"flags win", map[string]string{"DD_AGENT_HOST": "agent"}, hb(heartbeatFlags{statsdAddr: "udp://:18125", forward: "udp://127.0.0.1:8125"}), "udp://127.0.0.1:8125"},
		{"no proxy, no forward", map[string]string{"DD_AGENT_HOST": "agent"}, watchFlags{}, ""},
		{"not DogStatsD", map[string]string{"DD_DOGSTATSD_URL": "tcp://agent:8125"}, hb(heartbeatFlags{statsdAddr: "udp://:18125"}), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.flags
			err := f.ddEnv(func(k string) string { return tc.env[k] })
			if bad := tc.name == "not DogStatsD"; bad != (err != nil) {
				t.Errorf("ddEnv: %v", err)
			}
			if f.rule.heartbeat.forward != tc.forward {
				t.Errorf("forward %q, want %q", f.rule.heartbeat.forward, tc.forward)
			}
		})
	}
}

// startWatch runs the stallwatch binary with args; its stdout is the
// child's (in -- CMD mode), its stderr holds the log. A child it started
// is killed when the test ends, before stallwatch is: an orphan would hold
// the log pipe open.
func startWatch(t *testing.T, args ...string) *testutil.Target {
	t.Helper()
	sw := testutil.Start(t, stallwatchBin(t), append([]string{"watch"}, args...)...)
	t.Cleanup(func() {
		if m := startedPid.FindStringSubmatch(sw.Stderr()); m != nil {
			pid, _ := strconv.Atoi(m[1])
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return sw
}

var startedPid = regexp.MustCompile(`msg=started pid=(\d+)`)

// exitStatusOf waits for tg and returns its exit status.
func exitStatusOf(t *testing.T, tg *testutil.Target, within time.Duration) int {
	t.Helper()
	select {
	case <-tg.Done():
	case <-time.After(within):
		t.Fatalf("stallwatch did not exit within %v; log:\n%s", within, tg.Stderr())
	}
	var ee *exec.ExitError
	if err := tg.ExitErr(); errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("stallwatch killed by %v; log:\n%s", ws.Signal(), tg.Stderr())
		}
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

func waitLog(t *testing.T, tg *testutil.Target, msg string, within time.Duration) {
	t.Helper()
	if err := testutil.Eventually(within, func() bool { return strings.Contains(tg.Stderr(), msg) }); err != nil {
		t.Fatalf("no log line %q within %v; log:\n%s", msg, within, tg.Stderr())
	}
}

// quiet are the flags that keep a test's stallwatch light: no flight
// recorder.
func quiet(beat string) []string {
	return []string{"--heartbeat-file", beat, "--baseline-freq", "0", "--out", filepath.Join(filepath.Dir(beat), "out")}
}

func TestWatchChildExitStatus(t *testing.T) {
	beater := beaterPath(t)
	tests := []struct {
		name   string
		child  []string
		signal syscall.Signal // sent to stallwatch once the child is ready
		want   int
	}{
		{"exit status", []string{"-exit-after", "1s", "-exit-code", "7"}, 0, 7},
		{"SIGTERM forwarded, child exits 42", []string{"-term-code", "42"}, syscall.SIGTERM, 42},
		{"SIGINT forwarded, child exits 3", []string{"-term-code", "3"}, syscall.SIGINT, 3},
		{"SIGTERM forwarded, child killed by it", nil, syscall.SIGTERM, 128 + int(syscall.SIGTERM)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			beat := filepath.Join(t.TempDir(), "beat")
			args := append(quiet(beat), "--", beater, "-file", beat, "-interval", "50ms")
			sw := startWatch(t, append(args, tc.child...)...)
			sw.WaitLine(t, "ready", 20*time.Second)
			if tc.signal != 0 {
				waitLog(t, sw, "heartbeat healthy", 10*time.Second)
				start := time.Now()
				if err := sw.Cmd.Process.Signal(tc.signal); err != nil {
					t.Fatal(err)
				}
				if got := exitStatusOf(t, sw, 5*time.Second); got != tc.want {
					t.Errorf("exit %d, want %d; log:\n%s", got, tc.want, sw.Stderr())
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("exit took %v after the signal", d)
				}
				return
			}
			if got := exitStatusOf(t, sw, 20*time.Second); got != tc.want {
				t.Errorf("exit %d, want %d; log:\n%s", got, tc.want, sw.Stderr())
			}
		})
	}
}

func TestWatchChildIgnoringSIGTERMGetsTheNext(t *testing.T) {
	beat := filepath.Join(t.TempDir(), "beat")
	sw := startWatch(t, append(quiet(beat), "--", beaterPath(t), "-file", beat, "-interval", "50ms", "-term-code", "9", "-term-ignore", "1")...)
	sw.WaitLine(t, "ready", 20*time.Second)
	waitLog(t, sw, "heartbeat healthy", 10*time.Second)
	if err := sw.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sw.WaitLine(t, "ignored ", 5*time.Second)
	waitLog(t, sw, "waiting for the target to exit", 5*time.Second)
	if err := sw.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := exitStatusOf(t, sw, 5*time.Second); got != 9 {
		t.Errorf("exit %d, want the child's 9 after the second SIGTERM; log:\n%s", got, sw.Stderr())
	}
}

func TestWatchChildExitsAtOnce(t *testing.T) {
	// The child is gone before stallwatch can watch it: its status is
	// still stallwatch's.
	sw := startWatch(t, "--heartbeat-proc", "--baseline-freq", "0", "--out", t.TempDir(), "--", "/bin/sh", "-c", "exit 5")
	if got := exitStatusOf(t, sw, 20*time.Second); got != 5 {
		t.Errorf("exit %d, want the child's 5; log:\n%s", got, sw.Stderr())
	}
	sw = startWatch(t, "--heartbeat-proc", "--", "/nonexistent/cmd")
	if got := exitStatusOf(t, sw, 20*time.Second); got != 127 || !strings.Contains(sw.Stderr(), "/nonexistent/cmd") {
		t.Errorf("missing command: exit %d, want 127 as a shell; log:\n%s", got, sw.Stderr())
	}
}

func TestWatchChildGetsStatsdURL(t *testing.T) {
	beater := beaterPath(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "dsd.sock")
	sw := startWatch(t, "--heartbeat-statsd", "unix://"+sock, "--metric", "app.heartbeat", "--baseline-freq", "0",
		"--out", filepath.Join(dir, "out"), "--", beater, "-statsd", "env", "-interval", "50ms")
	sw.WaitLine(t, "ready", 20*time.Second)
	waitLog(t, sw, "heartbeat healthy", 10*time.Second)
	if !strings.Contains(sw.Stderr(), "statsd unix://"+sock) {
		t.Errorf("log does not name the heartbeat:\n%s", sw.Stderr())
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
	if got := exitStatusOf(t, sw, 5*time.Second); got != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want the child's death by SIGTERM (%d)", got, 128+int(syscall.SIGTERM))
	}
}

func TestWatchPidExitsWithTarget(t *testing.T) {
	// The target exits once watched: its beats stop with it, and the
	// silence must be taken for the exit it is, not for a stall.
	// --stall-after leaves a loaded machine's late beats room.
	beat := filepath.Join(t.TempDir(), "beat")
	cmd := exec.Command(beaterPath(t), "-file", beat, "-interval", "50ms")
	control, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	target := testutil.StartCmd(t, cmd)
	target.WaitLine(t, "ready", 10*time.Second)
	sw := startWatch(t, append(quiet(beat), "--pid", strconv.Itoa(target.Pid), "--stall-after", "2s")...)
	waitLog(t, sw, "heartbeat healthy", 30*time.Second)
	fmt.Fprintln(control, "exit 0")
	// 4, not 0: a unit with Restart=on-failure starts watch again.
	if got := exitStatusOf(t, sw, 20*time.Second); got != exitTargetExited {
		t.Errorf("exit %d after the target exited, want %d; log:\n%s", got, exitTargetExited, sw.Stderr())
	}
	log := sw.Stderr()
	if !strings.Contains(log, "target exited") || strings.Contains(log, "capture started") {
		t.Errorf("a target's exit must be reported as an exit, not a stall; log:\n%s", log)
	}
}

func TestWatchJSONLogStates(t *testing.T) {
	// A stall and its recovery, logged as JSON: one line per change of
	// state, with how long the stall lasted. --max-captures 0 only logs.
	dir := t.TempDir()
	beat := filepath.Join(dir, "beat")
	target, control := controlledBeater(t, beat, "20ms")
	sw := startWatch(t, append(quiet(beat), "--pid", strconv.Itoa(target.Pid), "--stall-after", "500ms", "--max-captures", "0", "--log-format", "json")...)
	waitLog(t, sw, `"msg":"heartbeat healthy"`, 20*time.Second)
	fmt.Fprintln(control, "stop")
	waitLog(t, sw, `"msg":"heartbeat stalled"`, 10*time.Second)
	// The stall began at least --stall-after before it was logged, and
	// lasts at least until the beats resume.
	stalledSeen := time.Now()
	fmt.Fprintln(control, "resume")
	least := 500*time.Millisecond + time.Since(stalledSeen)
	waitLog(t, sw, `"msg":"heartbeat recovered"`, 10*time.Second)
	// Recovered, then healthy again: the second healthy line.
	if err := testutil.Eventually(10*time.Second, func() bool {
		return strings.Count(sw.Stderr(), `"msg":"heartbeat healthy"`) >= 2
	}); err != nil {
		t.Fatalf("not healthy again after the recovery; log:\n%s", sw.Stderr())
	}
	var states []string
	var stall time.Duration
	for _, line := range strings.Split(strings.TrimSpace(sw.Stderr()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		if _, ok := rec["from"]; ok {
			states = append(states, rec["state"].(string))
		}
		if rec["msg"] == "heartbeat recovered" {
			// Durations are strings, as people write them.
			s, _ := rec["stall"].(string)
			var err error
			if stall, err = time.ParseDuration(s); err != nil {
				t.Errorf("stall %v: %v", rec["stall"], err)
			}
		}
	}
	if got := strings.Join(states, " "); !strings.HasPrefix(got, "healthy stalled recovered healthy") {
		t.Errorf("state changes %q, want healthy stalled recovered healthy", got)
	}
	if d := stall; d < least || d > 20*time.Second {
		t.Errorf("recovered after a stall of %v, want at least %v", d, least)
	}
}

// captureJSON reads the capture.json of the one capture directory under
// out whose name ends in -trigger.
func captureJSON(t *testing.T, out, trigger string) map[string]any {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(out, "*-"+trigger))
	if len(dirs) != 1 {
		t.Fatalf("capture directories %v under %s, want one *-%s", dirs, out, trigger)
	}
	for _, f := range []string{"profile.pb.gz", "threads.pb.gz", "report.txt"} {
		if _, err := os.Stat(filepath.Join(dirs[0], f)); err != nil {
			t.Errorf("capture lacks %s: %v", f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], "capture.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("capture.json: %v", err)
	}
	return m
}

func TestWatchSIGTERMDuringCapture(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	dir := t.TempDir()
	beat := filepath.Join(dir, "beat")
	cmd := exec.Command(beaterPath(t), "-file", beat, "-interval", "50ms")
	control, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	target := testutil.StartCmd(t, cmd)
	target.WaitLine(t, "ready", 10*time.Second)
	out := filepath.Join(dir, "out")
	sw := startWatch(t, "--pid", strconv.Itoa(target.Pid), "--heartbeat-file", beat, "--stall-after", "300ms",
		"--capture-for", "1m", "--history", "2s", "--out", out)
	waitLog(t, sw, "heartbeat healthy", 30*time.Second)
	fmt.Fprintln(control, "stop")
	waitLog(t, sw, "capture started", 20*time.Second)
	start := time.Now()
	if err := sw.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The capture is cut short and written, within the shutdown grace
	// (5 s), however loaded the machine.
	if got := exitStatusOf(t, sw, 10*time.Second); got != 0 {
		t.Errorf("exit %d after SIGTERM during a capture, want 0; log:\n%s", got, sw.Stderr())
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("SIGTERM to exit took %v, want at most the 5s grace", d)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", sw.Stderr())
		}
	})
	info := captureJSON(t, out, "stall")
	if info["cut_short"] != true {
		t.Errorf("capture.json cut_short = %v, want true", info["cut_short"])
	}
	if why, _ := info["cut_short_why"].(string); why != "" && !strings.Contains(why, "interrupted") {
		t.Errorf("cut short because %q", why)
	}
	select {
	case <-target.Done():
		t.Error("the target died with stallwatch")
	default:
	}
}

func TestWatchSIGUSR1CapturesNow(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	dir := t.TempDir()
	beat := filepath.Join(dir, "beat")
	target := testutil.Start(t, beaterPath(t), "-file", beat, "-interval", "50ms")
	target.WaitLine(t, "ready", 10*time.Second)
	out := filepath.Join(dir, "out")
	sw := startWatch(t, "--pid", strconv.Itoa(target.Pid), "--heartbeat-file", beat, "--capture-for", "500ms",
		"--baseline-freq", "0", "--out", out)
	waitLog(t, sw, "heartbeat healthy", 20*time.Second)
	if err := sw.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitLog(t, sw, "capture written", 20*time.Second)
	info := captureJSON(t, out, "signal")
	if info["trigger"] != "signal" {
		t.Errorf("capture.json trigger %v", info["trigger"])
	}
	if strings.Contains(sw.Stderr(), "heartbeat stalled") {
		t.Errorf("a healthy target was reported stalled:\n%s", sw.Stderr())
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGINT)
	if got := exitStatusOf(t, sw, 5*time.Second); got != 0 {
		t.Errorf("exit %d after SIGINT, want 0", got)
	}
}

// TestStackCopyFlag: --stack-copy auto (the default) leaves the copies to
// grow (capture.Config.StackCopy 0); a size fixes them.
func TestStackCopyFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"auto"}, 0},
		{[]string{"32KiB"}, 32 << 10},
		{[]string{"32KiB", "auto"}, 0},
		{[]string{"8192"}, 8192},
	} {
		c := captureFlags{freq: capture.DefaultFreq}
		for _, a := range tc.args {
			if err := c.stackCopy.Set(a); err != nil {
				t.Fatalf("--stack-copy %s: %v", a, err)
			}
		}
		if err := c.check(); err != nil {
			t.Fatalf("--stack-copy %v: %v", tc.args, err)
		}
		var cfg capture.Config
		c.apply(&cfg)
		if cfg.StackCopy != tc.want {
			t.Errorf("--stack-copy %v: capture.Config.StackCopy %d, want %d", tc.args, cfg.StackCopy, tc.want)
		}
	}
}
