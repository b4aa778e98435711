package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/kernelctx"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	reports "github.com/stallwatch/stallwatch/report"
)

// cpuSeries samples a process's CPU time (schedstat, ns) and the host's
// steal time every 5 ms, so that the CPU time it used between two
// wall-clock moments can be read back: what a period's samples must
// stand for.
type cpuSeries struct {
	mu    sync.Mutex
	at    []time.Time
	cpu   []time.Duration
	steal []time.Duration
	stop  chan struct{}
	done  chan struct{}
}

func watchCPU(t *testing.T, pid int) *cpuSeries {
	s := &cpuSeries{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			c, err := testutil.CPUTime(pid)
			host, serr := kernelctx.ReadProcStat()
			if err == nil && serr == nil {
				s.mu.Lock()
				s.at, s.cpu, s.steal = append(s.at, time.Now()), append(s.cpu, c), append(s.steal, host.Stolen())
				s.mu.Unlock()
			}
			select {
			case <-tick.C:
			case <-s.stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(s.stop); <-s.done })
	return s
}

// bounds is what the readings can say of the time the sampler's clock
// ran on the target's CPUs between a and b: at least the CPU time used
// between the first reading after a and the last before b, at most the
// CPU time used between the last reading before a and the first after
// b, and the host's steal time then (cpu-clock runs on through it,
// schedstat does not: kernelctx.CPUTimes.Stolen). A loaded host runs the 5 ms ticker
// late, so the readings around a period's edges may be far from them.
func (s *cpuSeries) bounds(a, b time.Time) (lo, hi time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmp := func(x, y time.Time) int { return x.Compare(y) }
	i, _ := slices.BinarySearchFunc(s.at, a, cmp) // first at or after a
	j, _ := slices.BinarySearchFunc(s.at, b, cmp) // first at or after b
	if j == len(s.at) {
		return 0, 0 // no reading after b yet
	}
	last := j // last at or before b
	if s.at[j].After(b) {
		last = j - 1
	}
	if last > i {
		lo = s.cpu[last] - s.cpu[i]
	}
	first := i // last at or before a
	if i == len(s.at) || s.at[i].After(a) {
		first = i - 1
	}
	if first >= 0 {
		hi = s.cpu[j] - s.cpu[first] + s.steal[j] - s.steal[first]
	}
	return lo, hi
}

// parseEventTime reads event.json's start or end.
func parseEventTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("event.json time %q: %v", s, err)
	}
	return v
}

// hasFunction reports whether a profile names fn in some stack.
func hasFunction(p *profile.Profile, fn string) bool {
	for _, f := range p.Function {
		if f.Name == fn {
			return true
		}
	}
	return false
}

// TestContinuousNodeUploads: a real Node.js with --perf-prof, profiled
// every 2 s into the stand-in intake, the agent down for the first two
// periods and up from then on. The first four periods all arrive, once
// each and in order, in the form ddprof sends (family native, one
// profile.pprof, start and end, the process's tags): contiguous, every
// sample stamped inside its period, its samples 97 Hz × the CPU time the
// target used in it within 10% (2 samples at least: a period on a loaded
// machine may hold a few dozen; more by the host's steal time, which the
// sampler's clock counts and the CPU time does not), and JavaScript's own
// function names in each.
func TestContinuousNodeUploads(t *testing.T) {
	t.Parallel() // its node, intake and watch; waits on 2 s periods
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	node := testutil.RequireTool(t, "node")
	dir := t.TempDir()
	cmd := exec.Command(node, "--perf-prof", testutil.Testdata(t, "node", "fib.js"), "22")
	cmd.Dir = dir
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 30*time.Second)
	cpu := watchCPU(t, tg.Pid)

	// An agent that is not there yet: a port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out := filepath.Join(dir, "out")
	sw := startWatch(t, "--pid", strconv.Itoa(tg.Pid), "--heartbeat-proc", "--stall-after", "5m", "--baseline-freq", "0",
		"--profile-period", "2s", "--out", out, "--upload", "http://"+addr, "--statsd", "off", "--service", "fib", "--env", "test")
	waitLog(t, sw, "continuous profile on", 30*time.Second)
	periods := filepath.Join(out, "profiles", strconv.Itoa(tg.Pid)+"-node")
	if err := testutil.Eventually(30*time.Second, func() bool {
		files, _ := filepath.Glob(filepath.Join(periods, "*.pb.gz"))
		return len(files) >= 2
	}); err != nil {
		t.Fatalf("two periods not written within 30 s; log:\n%s", sw.Stderr())
	}
	intake := intaketest.StartAt(t, addr)
	ups := intake.Wait(t, 4, 60*time.Second)[:4]
	_ = sw.Cmd.Process.Signal(syscall.SIGINT)
	if got := exitStatusOf(t, sw, 20*time.Second); got != 0 {
		t.Errorf("exit %d after SIGINT; log:\n%s", got, sw.Stderr())
	}

	starts := map[string]int{}
	for _, u := range intake.Uploads() {
		starts[u.Event.Start]++
	}
	var prevEnd time.Time
	for i, u := range ups {
		if n := starts[u.Event.Start]; n != 1 {
			t.Errorf("period %d (start %s) uploaded %d times", i, u.Event.Start, n)
		}
		if u.Event.Family != "native" || u.Event.Version != "4" || !slices.Equal(u.Event.Attachments, []string{"profile.pprof"}) || len(u.Profiles) != 1 {
			t.Errorf("period %d: family %q version %q attachments %v", i, u.Event.Family, u.Event.Version, u.Event.Attachments)
		}
		for _, want := range []string{"service:fib", "env:test", "language:native", "process_id:" + strconv.Itoa(tg.Pid), "process:node", "runtime:node"} {
			if !slices.Contains(u.Tags, want) {
				t.Errorf("period %d: tags %v lack %s", i, u.Tags, want)
			}
		}
		if v, ok := u.Tag("host"); !ok || v == "" {
			t.Errorf("period %d: no host tag in %v", i, u.Tags)
		}
		if v, ok := u.Tag("profiler_version"); !ok || v == "" {
			t.Errorf("period %d: no profiler_version tag in %v", i, u.Tags)
		}
		start, end := parseEventTime(t, u.Event.Start), parseEventTime(t, u.Event.End)
		if i > 0 && !start.Equal(prevEnd) {
			t.Errorf("period %d starts at %v, the one before ended at %v", i, start, prevEnd)
		}
		// The first period's start is the session's reading of the
		// clocks, the others the schedule's: within a microsecond.
		if d := end.Sub(start); d < 2*time.Second-time.Microsecond || d > 2*time.Second+time.Microsecond || i > 1 && d != 2*time.Second {
			t.Errorf("period %d lasts %v, want 2s", i, d)
		}
		prevEnd = end
		p := u.Profiles["profile.pprof"]
		var samples int64
		for _, s := range p.Sample {
			ts := s.NumLabel[model.LabelEndTime]
			if len(ts) != 1 || ts[0] < start.UnixNano() || ts[0] > end.UnixNano() {
				t.Fatalf("period %d [%v, %v]: a sample stamped %v", i, start, end, ts)
			}
			samples += s.Value[0]
		}
		// 97 Hz of the target's CPU time, within 10% (and a sample for
		// the period's edges) of what the readings bound it by.
		lo, hi := cpu.bounds(start, end)
		if least, most := lo.Seconds()*97*0.9-1, hi.Seconds()*97*1.1+1; hi == 0 || float64(samples) < least || float64(samples) > most {
			t.Errorf("period %d: %d samples for %v–%v of CPU at 97 Hz, want %.0f to %.0f", i, samples, lo, hi, least, most)
		}
		if !hasFunction(p, "fibonacci") {
			t.Errorf("period %d names no fibonacci (JavaScript from the jitdump): %d functions", i, len(p.Function))
		}
		t.Logf("period %d: %s → %s, %d samples for %v–%v of CPU (and steal)", i, u.Event.Start, u.Event.End, samples, lo, hi)
	}
	if _, err := os.Stat(periods); err != nil {
		t.Error(err)
	}
}

// TestContinuousJITReplaced: an LLVM JIT (lli --jit-kind=mcjit, whose
// PerfJITEventListener writes a jitdump) whose code is replaced during
// the run: the process executes lli again on another module, and the
// JIT loads hot_after where hot_before was (the same address, as the
// test checks in the two jitdumps). Profiled every second, each period
// names the code of its own time: every sample of hot_before ends before
// the replacement was seen, every sample of hot_after after it was asked
// for, the periods before name hot_before alone and those after
// hot_after alone.
func TestContinuousJITReplaced(t *testing.T) {
	t.Parallel() // its lli and watch; waits on the periods
	testutil.RequirePerf(t)
	lli := testutil.RequireTool(t, "lli")
	setarch := testutil.RequireTool(t, "setarch")
	dir := t.TempDir()
	// setarch -R: the address space is laid out alike after the exec, so
	// that the new code lands where the old one was.
	cmd := exec.Command(setarch, "-R", lli, "--jit-kind=mcjit", testutil.Testdata(t, "llvm", "before.ll"), lli, testutil.Testdata(t, "llvm", "after.ll"))
	cmd.Env = append(os.Environ(), "JITDUMPDIR="+dir)
	swap, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 30*time.Second)
	out := filepath.Join(dir, "out")
	sw := startWatch(t, "--pid", strconv.Itoa(tg.Pid), "--heartbeat-proc", "--stall-after", "5m", "--baseline-freq", "0",
		"--profile-period", "1s", "--out", out, "--upload", "off", "--statsd", "off")
	waitLog(t, sw, "continuous profile on", 30*time.Second)
	periods := filepath.Join(out, "profiles", strconv.Itoa(tg.Pid)+"-lli")
	written := func(n int) {
		t.Helper()
		if err := testutil.Eventually(30*time.Second, func() bool {
			files, _ := filepath.Glob(filepath.Join(periods, "*.pb.gz"))
			return len(files) >= n
		}); err != nil {
			t.Fatalf("%d periods not written within 30 s; log:\n%s", n, sw.Stderr())
		}
	}
	written(3)
	asked := time.Now()
	if _, err := swap.Write([]byte("swap\n")); err != nil {
		t.Fatal(err)
	}
	tg.WaitLine(t, "swapped", 30*time.Second)
	seen := time.Now()
	before, _ := filepath.Glob(filepath.Join(periods, "*.pb.gz"))
	written(len(before) + 3)
	_ = sw.Cmd.Process.Signal(syscall.SIGINT)
	exitStatusOf(t, sw, 20*time.Second)

	dumps, _ := filepath.Glob(filepath.Join(dir, ".debug", "jit", "*", "jit-*.dump"))
	if len(dumps) != 2 {
		t.Fatalf("jitdumps %v, want one before and one after the exec", dumps)
	}
	files, _ := filepath.Glob(filepath.Join(periods, "*.pb.gz"))
	var oldOnly, newOnly int
	for _, f := range files {
		p, err := reports.ReadProfile(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Unix(0, p.TimeNanos)
		end := start.Add(time.Duration(p.DurationNanos))
		var old, new int64
		for _, s := range p.Sample {
			names := funcNames(s)
			ts := time.Unix(0, s.NumLabel[model.LabelEndTime][0])
			switch {
			case slices.Contains(names, "hot_before"):
				old += s.Value[0]
				if ts.After(seen) {
					t.Errorf("%s: hot_before at %v, after the replacement was seen at %v", filepath.Base(f), ts, seen)
				}
			case slices.Contains(names, "hot_after"):
				new += s.Value[0]
				if ts.Before(asked) {
					t.Errorf("%s: hot_after at %v, before it was asked for at %v", filepath.Base(f), ts, asked)
				}
			}
		}
		switch {
		case end.Before(asked) && old > 0 && new == 0:
			oldOnly++
		case start.After(seen) && new > 0 && old == 0:
			newOnly++
		case end.Before(asked) || start.After(seen):
			t.Errorf("%s [%v, %v]: %d samples of hot_before, %d of hot_after (replaced between %v and %v)", filepath.Base(f), start, end, old, new, asked, seen)
		}
	}
	if oldOnly < 2 || newOnly < 2 {
		t.Errorf("%d periods name the old code alone before the replacement, %d the new alone after; want 2 of each", oldOnly, newOnly)
	}
}

// funcNames are a sample's function names, innermost first.
func funcNames(s *profile.Sample) []string {
	var names []string
	for _, l := range s.Location {
		for _, ln := range l.Line {
			names = append(names, ln.Function.Name)
		}
	}
	return names
}

// TestDaemonContinuous: a daemon rule that profiles every 2 s, over
// three real processes: one runs on, one exits, one freezes. Each one's
// periods are uploaded, tagged as its stall capture is (the rule's
// service and tags, the host, process_id); the exited one's last period
// ends at its exit, marked; the frozen one's stall capture is uploaded
// beside its periods, with the trigger tag, and its capture.json says
// where the periods are.
func TestDaemonContinuous(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	tag := marker()
	intake := intaketest.Start(t)
	e := newDaemonEnv(t, `
out: OUT
tags: dc:east
rules:
  - name: svc
    match:
      cmdline: 'beater .*-metric `+tag+`'
    service: svc
    tags: team:payments
    heartbeat-proc: true
    stall-after: 1s
    capture-for: 300ms
    max-captures: 1
    recapture-after: 1h
    profile-period: 2s
`)
	start := func() *testutil.Target {
		tg := testutil.StartCmd(t, exec.Command(beaterPath(t), "-interval", "50ms", "-metric", tag, "-spin"))
		tg.WaitLine(t, "ready", 20*time.Second)
		return tg
	}
	runs, exits, freezes := start(), start(), start()
	e.start(t, "--upload", intake.URL, "--statsd", "off")
	for _, tg := range []*testutil.Target{runs, exits, freezes} {
		e.waitTarget(t, tg.Pid, "watched", 30*time.Second, watched)
	}
	if err := testutil.Eventually(30*time.Second, func() bool {
		n := 0
		for _, u := range intake.Uploads() {
			if v, _ := u.Tag("process_id"); v == strconv.Itoa(freezes.Pid) {
				n++
			}
		}
		return n >= 2
	}); err != nil {
		t.Fatalf("no two periods of pid %d uploaded within 30 s; log:\n%s", freezes.Pid, e.sw.Stderr())
	}
	if err := syscall.Kill(freezes.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(freezes.Pid, syscall.SIGCONT)
	if err := syscall.Kill(exits.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exits.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the beater did not exit")
	}
	exited := time.Now()
	byPID := func() map[string][]*intaketest.Upload {
		m := map[string][]*intaketest.Upload{}
		for _, u := range intake.Uploads() {
			v, _ := u.Tag("process_id")
			m[v] = append(m[v], u)
		}
		return m
	}
	pr, pe, pf := strconv.Itoa(runs.Pid), strconv.Itoa(exits.Pid), strconv.Itoa(freezes.Pid)
	if err := testutil.Eventually(60*time.Second, func() bool {
		m := byPID()
		stall := slices.ContainsFunc(m[pf], func(u *intaketest.Upload) bool { return slices.Contains(u.Tags, "trigger:stall") })
		cut := slices.ContainsFunc(m[pe], func(u *intaketest.Upload) bool { return slices.Contains(u.Tags, "period_cut:target_exited") })
		return stall && cut && len(m[pr]) >= 3
	}); err != nil {
		for pid, ups := range byPID() {
			for _, u := range ups {
				t.Logf("pid %s: %s → %s %v", pid, u.Event.Start, u.Event.End, u.Tags)
			}
		}
		t.Fatalf("not every upload came; log:\n%s", e.sw.Stderr())
	}
	_ = e.sw.Cmd.Process.Signal(syscall.SIGTERM)
	if code := exitStatusOf(t, e.sw, 30*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; log:\n%s", code, e.sw.Stderr())
	}

	m := byPID()
	for pid, ups := range m {
		for _, u := range ups {
			for _, want := range []string{"service:svc", "team:payments", "dc:east", "process:beater", "language:native", "runtime:go", "process_id:" + pid} {
				if !slices.Contains(u.Tags, want) {
					t.Errorf("upload of pid %s (%s → %s): tags %v lack %s", pid, u.Event.Start, u.Event.End, u.Tags, want)
				}
			}
			if v, ok := u.Tag("host"); !ok || v == "" {
				t.Errorf("upload of pid %s: no host in %v", pid, u.Tags)
			}
		}
	}
	// The exited process's last period ends at its exit, and none after.
	// (Not "shorter than the 2 s period": a period begins where the one
	// before it ended, which a loaded host makes late — 2.05 s — so one
	// cut by an exit just after its nominal end can be longer.)
	last := m[pe][len(m[pe])-1]
	end := parseEventTime(t, last.Event.End)
	if !slices.Contains(last.Tags, "period_cut:target_exited") || end.After(exited) {
		t.Errorf("the exited process's last period %s → %s, tags %v (it exited by %v)", last.Event.Start, last.Event.End, last.Tags, exited)
	}
	// The frozen one's capture, among its periods.
	var capture *intaketest.Upload
	periods := 0
	for _, u := range m[pf] {
		if slices.Contains(u.Tags, "trigger:stall") {
			capture = u
		} else {
			periods++
		}
	}
	if capture == nil || capture.Profiles["threads.pprof"] == nil || periods < 2 {
		t.Fatalf("pid %s: capture %v and %d periods", pf, capture, periods)
	}
	dirs := captureDirs(t, e.out, freezes.Pid, "stall")
	if len(dirs) != 1 {
		t.Fatalf("capture directories of pid %d: %v", freezes.Pid, dirs)
	}
	info := readFile(t, filepath.Join(e.out, dirs[0], "capture.json"))
	if want := filepath.Join(e.out, "profiles", pf+"-beater"); !strings.Contains(info, `"dir": "`+want+`"`) || !strings.Contains(info, `"uploaded": true`) {
		t.Errorf("capture.json does not say where the continuous profile is (%s):\n%s", want, info)
	}
}

// TestContinuousFromStart is continuous profiling as a user starts it:
// `watch --profile-period 3s -- node --perf-prof app.js`, no agent. The
// session opens before V8 has mapped its code space; the first period's
// stacks through the JavaScript code are mostly whole all the same (they stopped
// at the first return address into that code, "not in executable code",
// until the maps were read again at the period's end: 100% of them in a
// 5 s period). Then `stallwatch report OUT/profiles --from --to` renders
// the periods merged, and says that their JIT names came from the
// jitdump (it said "0 JIT sources", and a finding "no JIT symbol file
// was found" beside the names the jitdump gave).
func TestContinuousFromStart(t *testing.T) {
	t.Parallel() // its node and watch; waits on 3 s periods
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	node := testutil.RequireTool(t, "node")
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cmd := exec.Command(stallwatchBin(t), "watch", "--heartbeat-proc", "--stall-after", "5m", "--baseline-freq", "0",
		"--profile-period", "3s", "--out", out, "--upload", "off", "--statsd", "off",
		"--", node, "--perf-prof", testutil.Testdata(t, "node", "fib.js"), "22")
	cmd.Dir = dir // where node writes its jitdump
	sw := testutil.StartCmd(t, cmd)
	line := sw.WaitLine(t, "ready", 30*time.Second)
	pid := strings.TrimSpace(strings.TrimPrefix(line, "ready"))
	periods := filepath.Join(out, "profiles", pid+"-node")
	if err := testutil.Eventually(30*time.Second, func() bool {
		files, _ := filepath.Glob(filepath.Join(periods, "*.pb.gz"))
		return len(files) >= 2
	}); err != nil {
		t.Fatalf("two periods not written within 30 s; log:\n%s", sw.Stderr())
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-sw.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("stallwatch did not exit after SIGINT; log:\n%s", sw.Stderr())
	}

	files, _ := filepath.Glob(filepath.Join(periods, "*.pb.gz"))
	slices.Sort(files)
	var from, to time.Time
	for i, f := range files {
		p, err := reports.ReadProfile(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			from = time.Unix(0, p.TimeNanos)
		}
		to = time.Unix(0, p.TimeNanos+p.DurationNanos)
		var js, cut int64
		for _, s := range p.Sample {
			names := funcNames(s)
			if !slices.Contains(names, "fibonacci") {
				continue
			}
			js += s.Value[0]
			if slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "is not in executable code") }) {
				cut += s.Value[0]
			}
		}
		t.Logf("%s: %d samples in fibonacci, %d of them cut at a return address in no executable mapping", filepath.Base(f), js, cut)
		// The first samples after the start may stop there until the
		// maps are read again (beside the sampler, a quarter of a second
		// apart at most): 1 of 151 here on a quiet machine, 26 of 148
		// under -race at load 14.
		if i < 2 && (js == 0 || cut*3 > js) {
			t.Errorf("%s: %d of %d samples in fibonacci stop at a return address in no executable mapping (want a third at most)", filepath.Base(f), cut, js)
		}
	}

	var stdout, stderr strings.Builder
	if code := run([]string{"report", filepath.Join(out, "profiles"), "--from", from.Format(time.RFC3339Nano), "--to", to.Format(time.RFC3339Nano)}, &stdout, &stderr); code != exitOK {
		t.Fatalf("report: exit %d: %s", code, stderr.String())
	}
	text := stdout.String()
	first, _, _ := strings.Cut(text, "Details")
	if dumps, _ := filepath.Glob(filepath.Join(dir, "jit-*.dump")); len(dumps) != 1 {
		t.Errorf("jitdumps %v, want node's one", dumps)
	}
	if !strings.Contains(first, "CONTINUOUS capture of pid "+pid) || !strings.Contains(first, "1 JIT source") || !strings.Contains(first, "fibonacci") ||
		strings.Contains(text, "no JIT symbol file was found") {
		t.Errorf("the report of the periods:\n%s", first)
	}
}
