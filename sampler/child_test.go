package sampler

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// childEnv selects a child mode of the test binary: the permission tests
// run it as nobody, sampling itself.
const childEnv = "SAMPLER_TEST_CHILD"

// runChild runs a child mode if asked; it reports whether it ran one. It
// prints "ok" or the error, and exits 3 on a *perms.Error.
func runChild() bool {
	mode := os.Getenv(childEnv)
	if mode == "" {
		return false
	}
	cfg := Config{PID: os.Getpid(), Freq: 99}
	switch mode {
	case "kernel":
		cfg.Kernel = true
	case "user":
	case "offcpu":
		cfg.OffCPU = true
	case "nofile", "nofile-plan":
		// Room for the test binary's own descriptors and a few threads.
		cfg.PID, _ = strconv.Atoi(os.Getenv(childEnv + "_PID"))
		cfg.OffCPU, cfg.Kernel, cfg.Freq = true, true, 997
		n, _ := strconv.ParseUint(os.Getenv(childEnv+"_LIMIT"), 10, 64)
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n})
		if mode == "nofile-plan" {
			plan, err := PlanFDs(cfg.PID, cfg.OffCPU, 4)
			if err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			cfg.MaxThreads, cfg.FoldTracker = plan.MaxThreads, plan.FoldTracker
			cfg.OffCPU = plan.OffCPU
			fmt.Printf("plan per-thread=%d max-threads=%d fold=%v offcpu=%v\n", plan.PerThread, plan.MaxThreads, plan.FoldTracker, plan.OffCPU)
		}
		return runNoFileChild(cfg)
	case "mlock":
		// No locked memory of our own beyond perf_event_mlock_kb.
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{})
		cfg.RingBytes = 8 << 20
	}
	s, err := Start(cfg)
	if err != nil {
		fmt.Println(err)
		var pe *perms.Error
		if errors.As(err, &pe) {
			os.Exit(3)
		}
		os.Exit(1)
	}
	s.Close()
	fmt.Println("ok")
	os.Exit(0)
	return true
}

// runNoFileChild starts a sampler that runs out of descriptors, raises
// its rate as a capture does, and prints what it sampled.
func runNoFileChild(cfg Config) bool {
	freq, offCPU := cfg.Freq, cfg.OffCPU
	cfg.Freq, cfg.OffCPU = 49, false // the flight recorder's rate
	// One descriptor kept aside to count the others with at the end.
	spare, _ := unix.Dup(0)
	base := openFDs()
	tasks, _ := procfs.Threads(cfg.PID)
	s, err := Start(cfg)
	if err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	started := openFDs() // 0 when none is left to read the directory with
	rateErr := s.SetRate(freq, offCPU)
	st := s.Stats()
	unix.Close(spare)
	fds := openFDs()
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	fmt.Printf("attached=%d over-budget=%d failed=%d tasks=%d base=%d fds=%d limit=%d started=%d\n", st.ThreadsAttached, st.ThreadsOverBudget, st.ThreadsFailed, len(tasks), base, fds, lim.Cur, started)
	for _, ti := range s.Threads() {
		if ti.Err != nil {
			fmt.Printf("tid %d: emfile=%v: %v\n", ti.TID, errors.Is(ti.Err, unix.EMFILE), ti.Err)
			break
		}
	}
	if rateErr != nil {
		fmt.Println("setrate:", rateErr)
	}
	s.Close()
	os.Exit(0)
	return true
}

// runAsNobody runs this test binary's child mode as user nobody.
func runAsNobody(t *testing.T, mode string) (string, int) {
	t.Helper()
	testutil.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sampler-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sampler.test")
	testutil.CopyExecutable(t, self, bin)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run as nobody: %v", err)
	}
	return strings.TrimSpace(string(out)), code
}

// Past RLIMIT_NOFILE's hard limit, threads that do not fit are counted,
// not fatal: unplanned, the kernel's EMFILE bounds the threads and the
// error says the numbers and the fix, and raising the rate gives
// descriptors back for the rest of a capture; planned (PlanFDs), the
// sampler never meets EMFILE at all.
func TestNoFileLimit(t *testing.T) {
	testutil.RequirePerf(t)
	// A C target: its thread count stays what it was when the limits
	// were computed (a Go target's runtime adds threads under load).
	tg := testutil.Start(t, testutil.BuildC(t, "manythreads/manythreads.c"), "16", "1")
	tg.WaitLine(t, "ready", 60*time.Second)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(mode string, limit int) string {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+mode, fmt.Sprintf("%s_PID=%d", childEnv, tg.Pid), fmt.Sprintf("%s_LIMIT=%d", childEnv, limit))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child %s: %v: %s", mode, err, out)
		}
		t.Logf("%s:\n%s", mode, out)
		return string(out)
	}
	var attached, over, failed, tasks, base, fds, limit, started int
	scan := func(out string) {
		t.Helper()
		i := strings.Index(out, "attached=")
		if i < 0 {
			t.Fatalf("no counts: %s", out)
		}
		if _, err := fmt.Sscanf(out[i:], "attached=%d over-budget=%d failed=%d tasks=%d base=%d fds=%d limit=%d started=%d", &attached, &over, &failed, &tasks, &base, &fds, &limit, &started); err != nil {
			t.Fatalf("counts: %v: %s", err, out)
		}
		if attached < 1 || attached+over+failed != tasks || failed != 0 {
			t.Errorf("attached %d, over budget %d, failed %d; want every one of %d threads attached or over budget", attached, over, failed, tasks)
		}
		if fds > limit {
			t.Errorf("%d descriptors open, limit %d", fds, limit)
		}
	}

	// Start runs out: the threads that fit are sampled, the rest counted.
	out := run("nofile", 40)
	scan(out)
	if over == 0 {
		t.Fatalf("RLIMIT_NOFILE 40 fitted all %d threads: the test needs a lower limit", tasks)
	}
	for _, w := range []string{"emfile=true", "RLIMIT_NOFILE is 40 (hard limit 40)", "file descriptors each", "ulimit -Hn", "LimitNOFILE", "prlimit"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	// Raising the rate runs out: off-CPU events missing on some threads
	// are said, and descriptors are given back for the rest of a capture.
	limit = base + samplerFDs + 2*tasks + 6 // every thread at the baseline, and six more
	out = run("nofile", limit)
	scan(out)
	if over != 0 {
		t.Errorf("%d threads over budget at a limit of %d", over, limit)
	}
	if !strings.Contains(out, "setrate: sampler: opening off-CPU events failed on") {
		t.Errorf("SetRate did not say which off-CPU events failed")
	}
	if started == 0 || fds > started {
		t.Errorf("%d of %d descriptors open after SetRate ran out, %d before it: what it opened was not given back", fds, limit, started)
	}

	out = run("nofile-plan", 28)
	scan(out)
	var per, maxThreads int
	if i := strings.Index(out, "plan "); i < 0 {
		t.Fatalf("no plan: %s", out)
	} else if _, err := fmt.Sscanf(out[i:], "plan per-thread=%d max-threads=%d", &per, &maxThreads); err != nil {
		t.Fatal(err)
	}
	if per != 1 || attached != min(maxThreads, tasks) || over != tasks-attached || over == 0 {
		t.Errorf("plan of %d events for %d threads; attached %d, over budget %d", per, maxThreads, attached, over)
	}
	if strings.Contains(out, "emfile=true") || strings.Contains(out, "setrate:") {
		t.Errorf("a planned sampler met EMFILE: %s", out)
	}
}

// Without privileges, a user is told what is missing and how to get it;
// user-only sampling of one's own process still works at paranoid 2.
func TestPermissionErrors(t *testing.T) {
	testutil.RequirePerf(t)
	paranoid, ok := perms.Paranoid()
	if !ok || paranoid < 2 {
		testutil.Skip(t, "kernel.perf_event_paranoid is %d: unprivileged kernel callchains are allowed here", paranoid)
	}
	cases := []struct {
		mode string
		code int
		want []string
	}{
		{"kernel", 3, []string{"perf_event_paranoid", "CAP_PERFMON", fmt.Sprintf("(it is %d)", paranoid), "sysctl kernel.perf_event_paranoid=1", "setcap", "--no-kernel"}},
		{"offcpu", 3, []string{"perf_event_paranoid", "CAP_PERFMON", "--no-offcpu"}},
		{"user", 0, []string{"ok"}},
		{"mlock", 3, []string{"perf_event_mlock_kb", "CAP_IPC_LOCK", "RLIMIT_MEMLOCK", "sudo sysctl kernel.perf_event_mlock_kb="}},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			out, code := runAsNobody(t, c.mode)
			t.Logf("exit %d: %s", code, out)
			if code != c.code {
				t.Errorf("exit code %d, want %d; output: %s", code, c.code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q: %s", w, out)
				}
			}
		})
	}
}
