package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
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

	"github.com/stallwatch/stallwatch/daemon"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// daemonEnv is one daemon under test: its directory, configuration file
// and control socket.
type daemonEnv struct {
	dir, config, socket, out string
	sw                       *testutil.Target
}

func newDaemonEnv(t testing.TB, config string) *daemonEnv {
	t.Helper()
	dir := t.TempDir()
	e := &daemonEnv{dir: dir, config: filepath.Join(dir, "stallwatch.yaml"), socket: filepath.Join(dir, "run", "control.sock"), out: filepath.Join(dir, "out")}
	e.write(t, config)
	return e
}

func (e *daemonEnv) write(t testing.TB, config string) {
	t.Helper()
	config = strings.ReplaceAll(config, "OUT", e.out)
	if err := os.WriteFile(e.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *daemonEnv) start(t testing.TB, extra ...string) {
	t.Helper()
	args := append([]string{"daemon", "--config", e.config, "--control-socket", e.socket, "--state-dir", filepath.Join(e.dir, "state")}, extra...)
	e.sw = testutil.Start(t, stallwatchBin(t), args...)
	if err := testutil.Eventually(60*time.Second, func() bool { return strings.Contains(e.sw.Stderr(), "msg=ready") }); err != nil {
		t.Fatalf("the daemon is not ready; log:\n%s", e.sw.Stderr())
	}
}

func (e *daemonEnv) status(t testing.TB) *daemon.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := daemon.Dial(ctx, e.socket, daemon.Request{Op: "status"})
	if err != nil {
		t.Fatalf("status: %v; log:\n%s", err, e.sw.Stderr())
	}
	return resp.Status
}

// target is the status of pid, or nil when it is not watched.
func (e *daemonEnv) target(t testing.TB, pid int) *daemon.TargetStatus {
	for _, ts := range e.status(t).Targets {
		if ts.PID == pid {
			return &ts
		}
	}
	return nil
}

// waitTarget waits until cond holds for pid's status (nil: not watched).
func (e *daemonEnv) waitTarget(t *testing.T, pid int, what string, within time.Duration, cond func(*daemon.TargetStatus) bool) {
	t.Helper()
	if err := testutil.Eventually(within, func() bool { return cond(e.target(t, pid)) }); err != nil {
		t.Fatalf("pid %d: not %s within %v: %+v; log:\n%s", pid, what, within, e.target(t, pid), e.sw.Stderr())
	}
}

func watched(ts *daemon.TargetStatus) bool   { return ts != nil }
func unwatched(ts *daemon.TargetStatus) bool { return ts == nil }
func healthy(ts *daemon.TargetStatus) bool   { return ts != nil && ts.State == "healthy" }

// marker makes the command lines of one test's targets its own.
func marker() string { return fmt.Sprintf("swd%08x", rand.Uint32()) }

// startBeater starts a beater whose command line carries tag: it beats
// every 50 ms, which its threads' progress shows.
func startBeater(t *testing.T, tag string) *testutil.Target {
	t.Helper()
	tg := testutil.StartCmd(t, exec.Command(beaterPath(t), "-interval", "50ms", "-metric", tag))
	tg.WaitLine(t, "ready", 20*time.Second)
	return tg
}

// captureDirs lists the capture directories of pid with trigger.
func captureDirs(t *testing.T, out string, pid int, trigger string) []string {
	ents, _ := os.ReadDir(out)
	var dirs []string
	suffix := fmt.Sprintf("-%d-%s", pid, trigger)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) || strings.Contains(e.Name(), suffix+"-") {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	// A socket is counted once however many descriptors name it: the
	// process connector is waited on through a duplicate of its socket
	// while no events come, and closed while they do.
	n, sockets := 0, map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:") {
			if sockets[l] {
				continue
			}
			sockets[l] = true
		}
		n++
	}
	return n
}

// TestDaemonManyTargets: several real processes matched by one rule's
// regular expression; two freeze and each is captured once, with its own
// pid; one that starts later is picked up; one that exits is dropped, and
// the daemon holds no descriptor of it after.
func TestDaemonManyTargets(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	tag := marker()
	e := newDaemonEnv(t, `
out: OUT
max-concurrent-captures: 2
defaults:
  stall-after: 1s
rules:
  - name: beaters
    match:
      cmdline: 'beater .*-metric `+tag+`'
    heartbeat-proc: true
    capture-for: 300ms
    max-captures: 1
    recapture-after: 1h
`)
	var tgs []*testutil.Target
	for range 4 {
		tgs = append(tgs, startBeater(t, tag))
	}
	e.start(t)
	for _, tg := range tgs {
		e.waitTarget(t, tg.Pid, "healthy", 30*time.Second, healthy)
	}
	if n := len(e.status(t).Targets); n != 4 {
		t.Fatalf("%d targets, want the 4 beaters", n)
	}

	// A process that starts is watched; one that exits is dropped, and
	// what the daemon held on it is closed.
	daemonPid := e.sw.Pid
	before := openFDs(daemonPid)
	late := startBeater(t, tag)
	e.waitTarget(t, late.Pid, "watched", 30*time.Second, watched)
	if err := late.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	e.waitTarget(t, late.Pid, "dropped", 30*time.Second, unwatched)
	// At most as many: "before" may hold the connection of the status
	// request just answered, closed since.
	if err := testutil.Eventually(10*time.Second, func() bool { return openFDs(daemonPid) <= before }); err != nil {
		t.Errorf("the daemon holds %d descriptors after the process it watched exited, %d before it started", openFDs(daemonPid), before)
	}

	// Two freeze; each is captured once, as itself.
	frozen := tgs[:2]
	for _, tg := range frozen {
		if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer syscall.Kill(tg.Pid, syscall.SIGCONT)
	}
	for _, tg := range frozen {
		// cooldown: its capture is written, the stall goes on.
		e.waitTarget(t, tg.Pid, "captured", 60*time.Second, func(ts *daemon.TargetStatus) bool {
			return ts != nil && ts.State == "cooldown" && ts.Captures == 1
		})
	}
	for _, tg := range frozen {
		dirs := captureDirs(t, e.out, tg.Pid, "stall")
		if len(dirs) != 1 {
			t.Errorf("pid %d: captures %v, want one", tg.Pid, dirs)
			continue
		}
		b, err := os.ReadFile(filepath.Join(e.out, dirs[0], "capture.json"))
		if err != nil || !strings.Contains(string(b), fmt.Sprintf(`"pid": %d`, tg.Pid)) {
			t.Errorf("pid %d: capture.json does not name it: %v\n%s", tg.Pid, err, b)
		}
	}
	for _, tg := range tgs[2:] {
		if dirs := captureDirs(t, e.out, tg.Pid, "stall"); len(dirs) > 0 {
			t.Errorf("pid %d never stalled, yet captured: %v", tg.Pid, dirs)
		}
		if ts := e.target(t, tg.Pid); ts == nil || ts.State != "healthy" {
			t.Errorf("pid %d: %+v, want healthy", tg.Pid, ts)
		}
	}

	// ctl capture: one on demand, its directory printed.
	out, err := exec.Command(stallwatchBin(t), "ctl", "capture", "-p", strconv.Itoa(tgs[2].Pid), "--control-socket", e.socket).CombinedOutput()
	if err != nil {
		t.Fatalf("ctl capture: %v\n%s", err, out)
	}
	dir := strings.TrimSpace(string(out))
	if !strings.HasSuffix(dir, fmt.Sprintf("-%d-signal", tgs[2].Pid)) {
		t.Errorf("ctl capture printed %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "capture.json")); err != nil {
		t.Errorf("ctl capture's directory: %v", err)
	}
	out, err = exec.Command(stallwatchBin(t), "ctl", "capture", "-p", "1", "--control-socket", e.socket).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not watched") {
		t.Errorf("ctl capture of a process nobody watches: %v: %s", err, out)
	}
	// ctl status, as a person reads it.
	out, err = exec.Command(stallwatchBin(t), "ctl", "status", "--control-socket", e.socket).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cooldown") || !strings.Contains(string(out), strconv.Itoa(tgs[3].Pid)) {
		t.Errorf("ctl status: %v\n%s", err, out)
	}
	// and as data: --format json, as snapshot and jit inspect spell it.
	out, err = exec.Command(stallwatchBin(t), "ctl", "status", "--format", "json", "--control-socket", e.socket).Output()
	var st daemon.Status
	if err != nil || json.Unmarshal(out, &st) != nil || len(st.Targets) == 0 {
		t.Errorf("ctl status --format json: %v\n%s", err, out)
	}

	// SIGTERM: a clean stop, exit 0.
	_ = e.sw.Cmd.Process.Signal(syscall.SIGTERM)
	if code := exitStatusOf(t, e.sw, 20*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; log:\n%s", code, e.sw.Stderr())
	}
}

// TestDaemonReload: SIGHUP puts a good configuration in force (a rule's
// processes change); a broken one is refused with its line, and the rules
// in force go on watching, new processes included.
func TestDaemonReload(t *testing.T) {
	tagA, tagB := marker(), marker()
	rule := func(tag string) string {
		return `
out: OUT
rules:
  - name: beaters
    match:
      cmdline: 'beater .*-metric ` + tag + `'
    heartbeat-proc: true
    max-captures: 0
`
	}
	e := newDaemonEnv(t, rule(tagA))
	a := startBeater(t, tagA)
	b := startBeater(t, tagB)
	e.start(t, "--scan-only", "--scan-interval", "200ms")
	e.waitTarget(t, a.Pid, "watched", 30*time.Second, watched)
	if e.target(t, b.Pid) != nil {
		t.Fatalf("pid %d watched, though no rule selects it", b.Pid)
	}

	e.write(t, rule(tagB))
	_ = e.sw.Cmd.Process.Signal(syscall.SIGHUP)
	e.waitTarget(t, b.Pid, "watched after the reload", 30*time.Second, watched)
	e.waitTarget(t, a.Pid, "dropped after the reload", 30*time.Second, unwatched)

	// Broken: an unclosed group in the regular expression on line 6.
	e.write(t, strings.Replace(rule(tagA), "cmdline: 'beater", "cmdline: '(beater", 1))
	_ = e.sw.Cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, e.sw, "configuration refused", 30*time.Second)
	if want := e.config + ":6:"; !strings.Contains(e.sw.Stderr(), want) {
		t.Errorf("the refusal does not say %q; log:\n%s", want, e.sw.Stderr())
	}
	// The rules in force go on: b stays, a new process of b's is
	// picked up, a's is not.
	b2 := startBeater(t, tagB)
	e.waitTarget(t, b2.Pid, "watched under the rules in force", 30*time.Second, watched)
	if e.target(t, b.Pid) == nil || e.target(t, a.Pid) != nil {
		t.Errorf("after a refused reload: %+v", e.status(t).Targets)
	}
	if e.sw.ExitErr() != nil || func() bool {
		select {
		case <-e.sw.Done():
			return true
		default:
			return false
		}
	}() {
		t.Fatalf("the daemon exited on a broken configuration")
	}
}

// TestDaemonConfigErrors: a configuration that cannot be used is refused
// at start with its file, line and reason, and exit status 2.
func TestDaemonConfigErrors(t *testing.T) {
	for _, c := range []struct{ name, config, want string }{
		{"yaml", "rules:\n  - name: a\n    match: x: y\n", ":3: mapping values are not allowed in this context"},
		{"unknown setting", "rules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n    stal-after: 3s\n", `:5: stal-after: unknown setting "stal-after" (did you mean "stall-after"?)`},
		{"bad value", "rules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n    stall-after: soon\n", `:5: stall-after: "soon": not a duration`},
		{"no heartbeat", "rules:\n  - name: a\n    match: {cmdline: x}\n", `:2: rule "a": no heartbeat`},
		{"proxy", "rules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-statsd: udp://:8125\n", ":4: heartbeat-statsd: the DogStatsD proxy serves one process"},
		{"rule setting at the top", "stall-after: 3s\nrules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n", ":1: stall-after: a rule setting"},
		{"host setting in a rule", "rules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n    out: /tmp\n", ":5: out: a host-wide setting"},
		{"service at the top", "service: bank\nrules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n", ":1: service: a rule setting"},
		{"statsd in a rule", "rules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n    statsd: udp://127.0.0.1:8125\n", ":5: statsd: a host-wide setting"},
		{"bad statsd", "statsd: 'udp://['\nrules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n", `: statsd: "[": not a DogStatsD address`},
		{"selector", "rules:\n  - name: a\n    match: {command: x}\n    heartbeat-proc: true\n", `:3: rule "a": match: unknown selector "command"`},
		{"regexp", "rules:\n  - name: a\n    match:\n      exe: '[x'\n    heartbeat-proc: true\n", `:4: rule "a": match: exe "[x": missing closing ]`},
		{"no rules", "out: /tmp/x\n", "no rules"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(c.config), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			code := run([]string{"daemon", "--config", path, "--check"}, &stdout, &stderr)
			if code != exitUsage || !strings.Contains(stderr.String(), path+c.want) && !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), path+c.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	_ = os.WriteFile(path, []byte("defaults: {stall-after: 5s}\nrules:\n  - name: a\n    match: {cmdline: x, user: root}\n    heartbeat-tap: udp://:8125\n    metric: app.*\n"), 0o644)
	var stdout, stderr strings.Builder
	if code := run([]string{"daemon", "--config", path, "--check"}, &stdout, &stderr); code != 0 || !slices.ContainsFunc(strings.Split(stdout.String(), "\n"), func(l string) bool {
		return strings.Contains(l, "a (line 3): cmdline=x user=root; stall after 5s")
	}) {
		t.Errorf("--check of a good configuration: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// TestDaemonTap: two processes send their metrics with the Datadog client
// to a UDP port nobody listens on; the daemon reads them off the wire,
// each as its own heartbeat, and when one stops sending only it stalls.
func TestDaemonTap(t *testing.T) {
	testutil.RequireRoot(t)
	tag := marker()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close() // nobody listens on it from here on
	e := newDaemonEnv(t, `
out: OUT
rules:
  - name: senders
    match:
      cmdline: 'beater .*-metric `+tag+`'
    heartbeat-tap: udp://:`+strconv.Itoa(port)+`
    metric: '`+tag+`'
    stall-after: 1s
    max-captures: 0
`)
	start := func() (*testutil.Target, io.Writer) {
		cmd := exec.Command(beaterPath(t), "-interval", "50ms", "-metric", tag, "-statsd", "127.0.0.1:"+strconv.Itoa(port), "-requests=false")
		control, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		tg := testutil.StartCmd(t, cmd)
		tg.WaitLine(t, "ready", 20*time.Second)
		return tg, control
	}
	a, stopA := start()
	b, _ := start()
	e.start(t)
	e.waitTarget(t, a.Pid, "healthy", 30*time.Second, healthy)
	e.waitTarget(t, b.Pid, "healthy", 30*time.Second, healthy)
	fmt.Fprintln(stopA, "stop")
	e.waitTarget(t, a.Pid, "stalled", 30*time.Second, func(ts *daemon.TargetStatus) bool { return ts != nil && ts.State == "stalled" })
	if ts := e.target(t, b.Pid); ts == nil || ts.State != "healthy" || ts.HeartbeatAge == nil || time.Duration(*ts.HeartbeatAge) > time.Second {
		t.Errorf("the sender that goes on: %+v", ts)
	}
	st := e.status(t)
	if len(st.Taps) != 1 || st.Taps[0].Attributed == 0 {
		t.Errorf("taps: %+v", st.Taps)
	}
}

// TestDaemonContainerTarget: a process in its own pid and mount namespace,
// as a container's is (unshare), with a private /tmp where its JIT writes
// its perf map and jitdump. The daemon finds it by its command line,
// watches it by its host pid, names it, and its capture names the JIT's
// functions from files only its namespace can see.
func TestDaemonContainerTarget(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequirePerf(t)
	node := testutil.RequireTool(t, "node")
	unshare := testutil.RequireTool(t, "unshare")
	tag := marker()
	// Not under /tmp: the target's /tmp is its own.
	dir, err := os.MkdirTemp("/var/tmp", "stallwatch-ns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	script := filepath.Join(dir, "fib-"+tag+".js")
	b, err := os.ReadFile(testutil.Testdata(t, "node", "fib.js"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--mount-proc",
		"/bin/sh", "-c", `mount -t tmpfs tmpfs /tmp && cd /tmp && exec "$0" --perf-basic-prof --perf-prof "$1"`, node, script)
	ns := testutil.StartCmd(t, cmd)
	ns.WaitLine(t, "ready", 60*time.Second)

	e := newDaemonEnv(t, `
out: OUT
rules:
  - name: contained
    match:
      cmdline: 'fib-`+tag+`\.js'
      exe: '/node$'
    heartbeat-proc: true
    max-captures: 0
    capture-for: 1s
`)
	e.start(t)
	var pid int
	if err := testutil.Eventually(30*time.Second, func() bool {
		for _, ts := range e.status(t).Targets {
			if ts.Rule == "contained" {
				pid = ts.PID
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the namespaced process is not watched; log:\n%s", e.sw.Stderr())
	}
	ts := e.target(t, pid)
	if !strings.Contains(ts.Command, "fib-"+tag+".js") || pid == 1 || pid == ns.Pid {
		t.Errorf("watched as %+v; want the host pid of node", ts)
	}
	out, err := exec.Command(stallwatchBin(t), "ctl", "capture", "-p", strconv.Itoa(pid), "--control-socket", e.socket).CombinedOutput()
	if err != nil {
		t.Fatalf("ctl capture: %v\n%s", err, out)
	}
	capDir := strings.TrimSpace(string(out))
	info := readInfo(t, capDir)
	if info.PID != pid || info.Counts.JITSources == 0 {
		t.Errorf("capture.json: pid %d (want %d), %d JIT sources", info.PID, pid, info.Counts.JITSources)
	}
	report, err := os.ReadFile(filepath.Join(capDir, "report.txt"))
	if err != nil || !strings.Contains(string(report), "fibonacci") {
		t.Errorf("the report does not name the JIT's fibonacci: %v\n%s", err, report)
	}
	if _, err := os.Stat("/tmp/perf-1.map"); err == nil {
		t.Logf("note: a /tmp/perf-1.map exists on the host too (not this test's)")
	}
}

// TestDaemonPIDFileAtOnce: a pidfile: target is watched the moment its
// pid file names it, written in place or renamed into place, not at the
// next backstop scan (every ten scan intervals with exec events: here 10
// minutes; it was 20 s by default).
func TestDaemonPIDFileAtOnce(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	runDir := t.TempDir()
	inPlace, renamed := filepath.Join(runDir, "in-place.pid"), filepath.Join(runDir, "renamed.pid")
	e := newDaemonEnv(t, `
out: OUT
scan-interval: 1m
rules:
  - name: in-place
    match: {pidfile: `+inPlace+`}
    heartbeat-proc: true
  - name: renamed
    match: {pidfile: `+renamed+`}
    heartbeat-proc: true
`)
	e.start(t)
	if !strings.Contains(e.sw.Stderr(), "exec events") {
		t.Logf("the daemon scans /proc only; this test then shows the pid file watch alone:\n%s", e.sw.Stderr())
	}
	a, b := startBeater(t, marker()), startBeater(t, marker())
	if err := os.WriteFile(inPlace, []byte(strconv.Itoa(a.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := renamed + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(b.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, renamed); err != nil {
		t.Fatal(err)
	}
	e.waitTarget(t, a.Pid, "watched (pid file written in place)", 10*time.Second, watched)
	e.waitTarget(t, b.Pid, "watched (pid file renamed into place)", 10*time.Second, watched)
	if ts := e.target(t, a.Pid); ts.Rule != "in-place" {
		t.Errorf("pid %d watched by rule %q, want in-place", a.Pid, ts.Rule)
	}
}

// TestDaemonExecBurst: a target that executes among a burst of the
// host's processes (a build, a cron job's shell) is watched at once, from
// its exec event: the daemon's bound on the work exec events make (2,000
// processes and 4 MiB of command lines a second) is of the bytes it
// reads. It charged each exec the 128 KiB an unanchored pattern may need
// whatever its command line held, so that after 32 execs in a second the
// rest were left to the backstop scan (here 10 minutes away).
func TestDaemonExecBurst(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	tag := marker()
	e := newDaemonEnv(t, `
out: OUT
scan-interval: 1m
rules:
  - name: beaters
    match: {cmdline: 'beater .*-metric `+tag+`'}
    heartbeat-proc: true
`)
	e.start(t)
	if !strings.Contains(e.sw.Stderr(), "exec events") {
		testutil.Skip(t, "the daemon cannot listen to the process connector here; a burst only matters to exec events")
	}
	// 150 execs, then the target: over a second boundary of the bound
	// or not, more than 32 come before it in its second. They live on
	// (one that exits in the batch of its exec is dropped unread, and
	// costs the bound nothing).
	for range 150 {
		cmd := exec.Command("/bin/sleep", "600")
		if err := testutil.StartProcess(cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	tg := startBeater(t, tag)
	e.waitTarget(t, tg.Pid, "watched after a burst of 150 execs", 10*time.Second, watched)
	if strings.Contains(e.sw.Stderr(), "left to the next scan") {
		t.Errorf("exec events were left to the scan:\n%s", e.sw.Stderr())
	}
}

// TestDaemonWrappers: `timeout 120 beater …` is two processes whose
// command lines both match 'beater .*-metric TAG'. The rule selects the
// beater, never timeout (whose threads only wait for it); --check lists
// what each rule selects now, says it passes over the wrapper, and warns
// when another selector (a pid file) names a wrapper all the same.
func TestDaemonWrappers(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	timeout := testutil.RequireTool(t, "timeout")
	tag := marker()
	startWrapped := func() (wrapper, child int) {
		tg := testutil.StartCmd(t, exec.Command(timeout, "120", beaterPath(t), "-interval", "50ms", "-metric", tag))
		tg.WaitLine(t, "ready", 20*time.Second)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", tg.Pid, tg.Pid))
		kids := strings.Fields(string(b))
		if err != nil || len(kids) != 1 {
			t.Fatalf("timeout's children: %q, %v", b, err)
		}
		child, _ = strconv.Atoi(kids[0])
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // timeout's SIGKILL leaves it
		return tg.Pid, child
	}
	wrapA, childA := startWrapped()
	wrapB, childB := startWrapped()
	pidfile := filepath.Join(t.TempDir(), "wrapper.pid")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(wrapB)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newDaemonEnv(t, `
out: OUT
rules:
  - name: beaters
    match: {cmdline: 'beater .*-metric `+tag+`'}
    heartbeat-proc: true
  - name: by-pidfile
    match: {pidfile: `+pidfile+`}
    heartbeat-proc: true
`)
	var stdout, stderr strings.Builder
	if code := run([]string{"daemon", "--config", e.config, "--check"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--check: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		fmt.Sprintf("selects pid %d: %s", childA, beaterPath(t)),
		fmt.Sprintf("selects pid %d: %s", childB, beaterPath(t)),
		fmt.Sprintf("passes over pid %d, a wrapper (timeout) whose arguments match: %s 120 ", wrapA, timeout),
		fmt.Sprintf("selects pid %d: %s 120 ", wrapB, timeout),
		fmt.Sprintf("warning: pid %d is a wrapper (timeout)", wrapB),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--check does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, fmt.Sprintf("selects pid %d:", wrapA)) {
		t.Errorf("--check selects the wrapper %d by its arguments:\n%s", wrapA, out)
	}

	e.start(t)
	e.waitTarget(t, childA, "watched", 30*time.Second, watched)
	e.waitTarget(t, childB, "watched", 30*time.Second, watched)
	e.waitTarget(t, wrapB, "watched (its pid file names it)", 30*time.Second, watched)
	if ts := e.target(t, wrapA); ts != nil {
		t.Errorf("the daemon watches the wrapper %d (timeout) by its arguments: %+v", wrapA, ts)
	}
}
