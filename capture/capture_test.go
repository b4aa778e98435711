package capture

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// record runs Record on pid for d into a temporary directory and returns
// the capture directory's profile and info.
//
// The Config is zero but for the pid and the directory: what it records
// is what the documented defaults record.
func record(t *testing.T, pid int, d time.Duration, mod func(*Config)) (*model.Result, *profile.Profile, *model.Info) {
	t.Helper()
	return recordCtx(t, context.Background(), pid, d, mod)
}

// recordCPU records pid until its threads have used cpu of CPU time since
// sampling began (for at most a minute) and returns the CPU time they
// used meanwhile as well. A test that needs a number of samples waits for
// the CPU time they stand for: on a loaded machine a target gets less of
// it in the same wall time, and attaching to it takes longer.
func recordCPU(t *testing.T, pid int, cpu time.Duration, mod func(*Config)) (*model.Result, *profile.Profile, *model.Info, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var c0, used time.Duration
	progress := func(Progress) { // about once a second, sampling under way
		c, err := testutil.CPUTime(pid)
		switch {
		case err != nil:
			cancel()
		case c0 == 0:
			c0 = c
		case c-c0 >= cpu:
			used = c - c0
			cancel()
		}
	}
	res, p, info := recordCtx(t, ctx, pid, time.Minute, mod, progress)
	cancel()
	return res, p, info, used
}

func recordCtx(t *testing.T, ctx context.Context, pid int, d time.Duration, mod func(*Config), progress ...func(Progress)) (*model.Result, *profile.Profile, *model.Info) {
	t.Helper()
	cfg := Config{PID: pid, Out: t.TempDir()}
	if mod != nil {
		mod(&cfg)
	}
	var pf func(Progress)
	if len(progress) > 0 {
		pf = progress[0]
	}
	res, err := Record(ctx, cfg, d, pf)
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	c, err := report.ReadCapture(context.Background(), res.Dir)
	if err != nil {
		t.Fatalf("ReadCapture(%s): %v", res.Dir, err)
	}
	if err := c.Profile.CheckValid(); err != nil {
		t.Fatalf("profile.CheckValid: %v", err)
	}
	return res, c.Profile, &c.Info
}

func valueIndex(t *testing.T, p *profile.Profile, typ string) int {
	t.Helper()
	for i, st := range p.SampleType {
		if st.Type == typ {
			return i
		}
	}
	t.Fatalf("profile has no sample type %q: %v", typ, p.SampleType)
	return -1
}

// funcs returns a sample's function names, innermost first (inlined
// functions included).
func funcs(s *profile.Sample) []string {
	var names []string
	for _, l := range s.Location {
		for _, ln := range l.Line {
			names = append(names, ln.Function.Name)
		}
	}
	return names
}

func threadName(s *profile.Sample) string {
	if v := s.Label[model.LabelThreadName]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func indexOf(names []string, want string) int {
	for i, n := range names {
		if n == want {
			return i
		}
	}
	return -1
}

// TestRecordOnCPU: a Go program spinning in main.spinHot on two threads;
// spinHot holds ≥ 90% of their CPU samples taken in user mode, with its
// callers beneath. (Samples taken in the kernel are the machine's: on a
// loaded one, interrupts and other processes' I/O completions run on the
// spinning threads' time.)
func TestRecordOnCPU(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.BuildGo(t, "spin")
	tg := testutil.Start(t, bin, "-threads", "2", "-depth", "2")
	tg.WaitLine(t, "ready", 10*time.Second)

	res, p, info, used := recordCPU(t, tg.Pid, 2*time.Second, nil)
	if info.Trigger != model.Manual || info.PID != tg.Pid || res.Info.Counts.Samples == 0 {
		t.Fatalf("capture.json: trigger %q pid %d, %d samples", info.Trigger, info.PID, res.Info.Counts.Samples)
	}
	// A zero Config is the defaults: kernel frames, off-CPU, ptrace, 997
	// Hz; auto unwinding picks frame pointers for a pure Go program.
	if want := (model.Settings{Freq: DefaultFreq, CaptureFor: time.Minute, OffCPU: true, Kernel: true, Ptrace: true, Unwind: "fp"}); info.Settings != want {
		t.Errorf("settings of a zero Config: %+v, want %+v", info.Settings, want)
	}
	ci := valueIndex(t, p, model.TypeCPUSamples)
	var total, hot, withCallers int64
	for _, s := range p.Sample {
		if !strings.HasPrefix(threadName(s), "spin-") {
			continue
		}
		n := s.Value[ci]
		if len(s.Location) > 0 && s.Location[0].Mapping != nil && strings.Contains(s.Location[0].Mapping.File, "kernel") {
			continue // taken in the kernel
		}
		total += n
		names := funcs(s)
		if i := indexOf(names, "main.spinHot"); i >= 0 && i <= 1 {
			hot += n
			if m, w := indexOf(names, "main.spinMiddle"), indexOf(names, "main.spinWorker"); m > i && w > m {
				withCallers += n
			}
		}
	}
	// cpu-clock samples a thread per period of its CPU time; the kernel's
	// share and the recording's edges take some.
	if want := int64(used.Seconds() * DefaultFreq / 2); total < want || total == 0 {
		t.Fatalf("%d user-mode CPU samples from the spin threads for %v of the target's CPU time at %d Hz, want at least %d", total, used, DefaultFreq, want)
	}
	if float64(hot) < 0.9*float64(total) {
		t.Errorf("main.spinHot on top in %d of %d samples of the spinning threads, want ≥ 90%%", hot, total)
	}
	if float64(withCallers) < 0.9*float64(hot) {
		t.Errorf("spinMiddle and spinWorker beneath spinHot in %d of %d samples", withCallers, hot)
	}
}

// TestRecordOffCPU: threads blocked for the whole recording, one in
// nanosleep and one reading a pipe, each off the CPU for ≥ 90% of it, on a
// stack with the kernel's wait function on top and the C function beneath
// (through libc, which has no frame pointers: the .eh_frame unwinder).
func TestRecordOffCPU(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	bin := testutil.BuildC(t, "offcpu/offcpu.c")
	tg := testutil.Start(t, bin)
	// Wait for both threads to block in their system calls: a recording
	// that starts before would see them run.
	roles := map[string]int{}
	for len(roles) < 2 {
		f := strings.Fields(tg.WaitLine(t, "", 10*time.Second))
		if len(f) == 2 && (f[0] == "sleeper" || f[0] == "piper") {
			roles[f[0]], _ = strconv.Atoi(f[1])
		}
	}
	tg.WaitLine(t, "ready", 10*time.Second)
	// glibc's nanosleep is clock_nanosleep(2).
	for role, nr := range map[string]int{"sleeper": unix.SYS_CLOCK_NANOSLEEP, "piper": unix.SYS_READ} {
		tid := roles[role]
		if err := testutil.Eventually(10*time.Second, func() bool {
			sc, err := procfs.ReadSyscall(tg.Pid, tid)
			return err == nil && !sc.Running && sc.Nr == nr
		}); err != nil {
			sc, _ := procfs.ReadSyscall(tg.Pid, tid)
			t.Fatalf("thread %s (%d) never blocked in system call %d (now %+v)", role, tid, nr, sc)
		}
	}

	const d = 2 * time.Second
	_, p, info := record(t, tg.Pid, d, nil)
	window := info.End.Sub(info.Start)
	oi := valueIndex(t, p, model.TypeOffCPUTime)
	cases := []struct {
		thread string
		kernel []string // one of these kernel functions is on the stack
		cfunc  string
	}{
		{"sleeper", []string{"hrtimer_nanosleep", "do_nanosleep", "common_nsleep"}, "sleep_forever"},
		{"piper", []string{"pipe_read", "anon_pipe_read"}, "read_forever"},
	}
	for _, c := range cases {
		var off time.Duration
		var good time.Duration
		var example []string
		for _, s := range p.Sample {
			if threadName(s) != c.thread || s.Value[oi] == 0 {
				continue
			}
			v := time.Duration(s.Value[oi])
			off += v
			names := funcs(s)
			example = names
			kernelTop := len(s.Location) > 0 && s.Location[0].Mapping != nil && strings.Contains(s.Location[0].Mapping.File, "kernel")
			k := -1
			for _, kf := range c.kernel {
				if i := indexOf(names, kf); i >= 0 {
					k = i
				}
			}
			if kernelTop && k >= 0 && indexOf(names, c.cfunc) > k {
				good += v
			}
		}
		if off < window*9/10 {
			t.Errorf("%s: off-CPU %v of a %v recording, want ≥ 90%%", c.thread, off, window)
		}
		if good < off*9/10 {
			t.Errorf("%s: only %v of %v off-CPU time on a stack with %v on top and %s beneath; a stack: %v",
				c.thread, good, off, c.kernel, c.cfunc, example)
		}
	}
}

// TestRecordNodeJIT: JavaScript function names from Node.js's jitdump
// appear as frames.
func TestRecordNodeJIT(t *testing.T) {
	testutil.RequirePerf(t)
	node := testutil.RequireTool(t, "node")
	dir := t.TempDir()
	cmd := exec.Command(node, "--perf-prof", testutil.Testdata(t, "node", "fib.js"))
	cmd.Dir = dir
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 30*time.Second)

	_, p, info := record(t, tg.Pid, 2*time.Second, func(c *Config) { c.NoOffCPU = true })
	if info.Counts.JITSources == 0 {
		t.Errorf("capture.json counts no JIT source; notes: %v", info.Notes)
	}
	ci := valueIndex(t, p, model.TypeCPUSamples)
	var total, fib int64
	for _, s := range p.Sample {
		total += s.Value[ci]
		for _, n := range funcs(s) {
			if strings.Contains(n, "fibonacci") {
				fib += s.Value[ci]
				break
			}
		}
	}
	if total == 0 || float64(fib) < 0.5*float64(total) {
		t.Errorf("fibonacci in %d of %d CPU samples of a process that runs it in a loop", fib, total)
	}
}

// TestRecordChurn: threads that come and go are all sampled, and the
// recorder's own descriptors return to their count.
func TestRecordChurn(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.BuildC(t, "churn/churn.c")
	tg := testutil.Start(t, bin)
	tg.WaitLine(t, "ready", 10*time.Second)
	before := testutil.OpenFDs(t)
	_, p, _ := record(t, tg.Pid, 2*time.Second, nil)
	tids := map[string]bool{}
	for _, s := range p.Sample {
		if v := s.Label[model.LabelThreadID]; len(v) > 0 {
			tids[v[0]] = true
		} else if v := s.NumLabel[model.LabelThreadID]; len(v) > 0 {
			tids[strconv.FormatInt(v[0], 10)] = true
		}
	}
	if len(tids) < 10 {
		t.Errorf("samples from %d threads of a process that starts threads continuously", len(tids))
	}
	if after := testutil.OpenFDs(t); after != before {
		t.Errorf("open fds %d before the recording, %d after", before, after)
	}
}

// TestRecordTargetExits: a target that exits mid-recording leaves a valid
// capture that says so.
func TestRecordTargetExits(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.BuildGo(t, "exiter")
	// The target exits when told, once the recording holds samples: on a
	// loaded machine a fixed delay may end it before the sampler attached.
	cmd := exec.Command(bin, "-stdin", "-after", "0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 10*time.Second)
	const d = time.Minute
	start := time.Now()
	var told bool
	res, err := Record(context.Background(), Config{PID: tg.Pid, Out: t.TempDir()}, d,
		func(p Progress) {
			if p.Samples > 0 && !told {
				told = true
				stdin.Close()
			}
		})
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	if !told {
		t.Fatalf("the target exited before the recording had a sample; stderr:\n%s", tg.Stderr())
	}
	if took := time.Since(start); took >= d {
		t.Errorf("Record took %v, its whole duration: it should end when the target exits", took)
	}
	c, err := report.ReadCapture(context.Background(), res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Info.TargetExited || !c.Info.TargetExited || !c.Info.CutShort {
		t.Errorf("result exited=%v, capture.json exited=%v cut_short=%v (%s)", res.Info.TargetExited, c.Info.TargetExited, c.Info.CutShort, c.Info.CutShortWhy)
	}
	if len(c.Profile.Sample) == 0 {
		t.Error("no samples kept from before the exit")
	}
}

// TestSessionCapture: the flight recorder's samples come as phase=before,
// the capture's as phase=during, and the directory holds every file of the
// contract.
func TestSessionCapture(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	bin := testutil.BuildGo(t, "spin")
	tg := testutil.Start(t, bin, "-threads", "2")
	tg.WaitLine(t, "ready", 10*time.Second)

	out := t.TempDir()
	s, err := Open(Config{PID: tg.Pid, Out: out, Freq: 499, BaselineFreq: 97, CaptureFor: time.Second,
		History: 5 * time.Second, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The flight recorder must hold samples before the trigger.
	if err := testutil.Eventually(30*time.Second, func() bool { return s.smp.Stats().Samples >= 20 }); err != nil {
		t.Fatalf("the flight recorder took %d samples of 2 spinning threads at 97 Hz", s.smp.Stats().Samples)
	}
	res, err := s.Capture(context.Background(), model.Trigger{Kind: model.Stall, Reason: "test", StallFor: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(filepath.Base(res.Dir), "-"+strconv.Itoa(tg.Pid)+"-stall") {
		t.Errorf("capture dir %s, want <time>-%d-stall", res.Dir, tg.Pid)
	}
	for _, f := range []string{capdir.FileProfile, capdir.FileThreads, capdir.FileText, capdir.FileHTML, capdir.FileInfo} {
		if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
			t.Errorf("capture dir lacks %s", f)
		}
	}
	p, err := report.ReadProfile(context.Background(), filepath.Join(res.Dir, capdir.FileProfile))
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]int{}
	for _, smp := range p.Sample {
		if v := smp.Label[model.LabelPhase]; len(v) > 0 {
			phases[v[0]]++
		}
	}
	if phases[model.PhaseBefore] == 0 || phases[model.PhaseDuring] == 0 {
		t.Errorf("samples by phase: %v, want both %q and %q", phases, model.PhaseBefore, model.PhaseDuring)
	}
	if err := s.Recovered(res, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	c, err := report.ReadCapture(context.Background(), res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Info.StallLen != 4*time.Second || c.Info.Recovered.IsZero() {
		t.Errorf("after Recovered: stall length %v, recovered %v", c.Info.StallLen, c.Info.Recovered)
	}
	if c.Threads == nil || len(c.Threads.Threads) < 3 {
		t.Errorf("thread snapshot missing or short: %+v", c.Threads)
	}
}

// TestConfigDefaults: a Config that sets only the pid means the documented
// defaults; the switches only turn things off.
func TestConfigDefaults(t *testing.T) {
	c := Config{PID: 1}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	want := Config{PID: 1, Out: DefaultOut, Freq: DefaultFreq, BaselineFreq: DefaultBaselineFreq,
		CaptureFor: DefaultCaptureFor, History: DefaultHistory, Unwind: UnwindAuto, ProfileFreq: DefaultProfileFreq, Logger: c.Logger}
	if c != want || c.Logger == nil {
		t.Errorf("filled zero Config:\n%+v\nwant\n%+v", c, want)
	}
	c = Config{PID: 1, BaselineFreq: 99, NoFlightRecorder: true}
	if err := c.fill(); err != nil || c.BaselineFreq != 0 {
		t.Errorf("NoFlightRecorder: baseline %d Hz (%v), want 0", c.BaselineFreq, err)
	}
	if err := (&Config{PID: 1, Freq: -1}).fill(); err == nil {
		t.Error("a negative rate was accepted")
	}
}

// TestRecordCountsTruncatedJitdump: a jitdump whose last record is cut
// mid-way — what a capture usually finds of V8's, which writes through a
// buffered stream — is counted in capture.json's jit_truncated and said in
// a note, while its complete records still name code.
func TestRecordCountsTruncatedJitdump(t *testing.T) {
	testutil.RequirePerf(t)
	node := testutil.RequireTool(t, "node")
	runDir := t.TempDir()
	cmd := exec.Command(node, "--perf-prof", testutil.Testdata(t, "node", "manyfuncs.js"), "50")
	cmd.Dir = runDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	dumps, _ := filepath.Glob(filepath.Join(runDir, "jit-*.dump"))
	if len(dumps) != 1 {
		t.Fatalf("node --perf-prof left %d jitdumps", len(dumps))
	}
	whole, err := os.ReadFile(dumps[0])
	if err != nil {
		t.Fatal(err)
	}

	// The target finds the dump in its working directory, written after
	// it started (an older file would be another process's).
	dir := t.TempDir()
	sleeper := exec.Command(testutil.BuildGo(t, "sleeper"))
	sleeper.Dir = dir
	tg := testutil.StartCmd(t, sleeper)
	tg.WaitLine(t, "ready", 10*time.Second)
	cut := whole[:len(whole)-7] // every record is longer than 7 bytes
	if err := os.WriteFile(filepath.Join(dir, "jit-"+strconv.Itoa(tg.Pid)+".dump"), cut, 0o644); err != nil {
		t.Fatal(err)
	}

	_, _, info := record(t, tg.Pid, 300*time.Millisecond, func(c *Config) { c.NoOffCPU = true })
	if info.Counts.JITTruncated != 1 || info.Counts.JITSources != 1 {
		t.Errorf("capture.json counts %d truncated of %d JIT sources, want 1 of 1; notes: %q",
			info.Counts.JITTruncated, info.Counts.JITSources, info.Notes)
	}
	if !strings.Contains(strings.Join(info.Notes, "\n"), "still being written") {
		t.Errorf("no note says the last record is still being written: %q", info.Notes)
	}
}

// TestRecordMainThreadExited: a process whose main thread left through
// pthread_exit (its own maps are empty) is recorded whole: not taken for
// exited, every frame of its spinning thread named.
func TestRecordMainThreadExited(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.Start(t, testutil.BuildC(t, "mainexit/mainexit.c"))
	tg.WaitLine(t, "ready ", 10*time.Second)
	if err := testutil.Eventually(10*time.Second, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(tg.Pid) + "/maps")
		return err == nil && len(b) == 0
	}); err != nil {
		t.Fatal("the main thread's maps never emptied: it did not exit")
	}
	_, p, info := record(t, tg.Pid, 500*time.Millisecond, nil)
	if info.TargetExited {
		t.Errorf("the process was taken for exited; notes %q", info.Notes)
	}
	var spins int
	for _, s := range p.Sample {
		names := funcs(s)
		if indexOf(names, "spin_in_worker") >= 0 {
			spins++
		}
		for _, n := range names {
			if strings.HasPrefix(n, "[unknown]") {
				t.Errorf("unnamed frame %s in %v", n, names)
			}
		}
	}
	if spins == 0 {
		t.Errorf("no sample in spin_in_worker; notes %q", info.Notes)
	}
	if info.Counts.MissingSymbols != 0 {
		t.Errorf("capture.json counts %d missing symbol sources; notes %q", info.Counts.MissingSymbols, info.Notes)
	}
}

// TestOpenTargetExited: a target gone before its session opens — a
// zombie whose parent has not reaped it yet, as a child that exits at
// once is to `watch -- CMD` — is model.ErrTargetExited, so that watch
// answers with the child's status rather than a failure of its own.
func TestOpenTargetExited(t *testing.T) {
	testutil.EndToEnd(t)
	cmd := exec.Command("/bin/sh", "-c", "exit 5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	if err := testutil.Eventually(10*time.Second, func() bool {
		st, err := procfs.ReadStat(pid, pid)
		return err == nil && st.State == 'Z'
	}); err != nil {
		t.Fatal("the child never became a zombie")
	}
	_, err := Open(Config{PID: pid, Out: t.TempDir()})
	if !errors.Is(err, model.ErrTargetExited) {
		t.Errorf("Open of an exited target: %v, want model.ErrTargetExited", err)
	}
}
