package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/sampler"
)

// A 7,000-thread target watched by a stallwatch whose hard RLIMIT_NOFILE
// cannot hold every event of every thread. At 20,000 (the audit's
// machine: the flight recorder's 14,000 descriptors fitted, and the
// first capture was lost to "too many open files … need 3") the tracker
// is folded and every thread sampled, off-CPU too; at 6,000 off-CPU is
// dropped and the busiest threads are sampled. Either way stallwatch
// warns once at start-up with the numbers and the fix, the capture is
// written — the snapshot with every thread, capture.json and the report
// saying what was not sampled and why — and its descriptors stay in
// bounds.
func TestWatchManyThreadsFewDescriptors(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireRoot(t)
	prlimit := testutil.RequireTool(t, "prlimit")
	const idle = 7000
	tg := testutil.Start(t, testutil.BuildC(t, "manythreads/manythreads.c"), strconv.Itoa(idle), "1")
	tg.WaitLine(t, "ready", 60*time.Second)
	threads := idle + 2 // the spinner, the main thread
	spinner := threadNamed(t, tg.Pid, "spinner")

	t.Run("20000 folds the tracker", func(t *testing.T) {
		c := watchWithLimit(t, prlimit, tg.Pid, 20000)
		c.check(t, threads, spinner)
		if c.sampled != threads || !strings.Contains(c.log, "events_per_thread=2") {
			t.Errorf("%d of %d threads sampled; want all, with two events each", c.sampled, threads)
		}
		if c.info.Settings.OffCPU != true || c.info.Counts.OffCPU == 0 {
			t.Errorf("off-CPU %v, %d intervals: it fits at two events per thread", c.info.Settings.OffCPU, c.info.Counts.OffCPU)
		}
		if !strings.Contains(c.notes, "no tracker events") || strings.Contains(c.notes, "no off-CPU sampling") {
			t.Errorf("capture.json's notes: %s", c.notes)
		}
	})
	t.Run("6000 samples the busiest", func(t *testing.T) {
		c := watchWithLimit(t, prlimit, tg.Pid, 6000)
		c.check(t, threads, spinner)
		if c.sampled >= threads || !strings.Contains(c.log, "events_per_thread=1") {
			t.Errorf("%d of %d threads sampled at one event each; want a subset", c.sampled, threads)
		}
		if c.info.Settings.OffCPU {
			t.Error("capture.json says off-CPU; the plan dropped it")
		}
		for _, w := range []string{fmt.Sprintf("only %d of the %d threads sampled", c.sampled, threads), "busiest by CPU time", "no off-CPU sampling",
			fmt.Sprintf("%d of %d threads were not sampled", threads-c.sampled, threads)} {
			if !strings.Contains(c.notes, w) {
				t.Errorf("capture.json's notes lack %q: %s", w, c.notes)
			}
		}
		if !strings.Contains(c.report, fmt.Sprintf("%s threads not sampled (too few file descriptors", fmtThousands(threads-c.sampled))) {
			t.Errorf("report.txt does not say what was not sampled:\n%.1500s", c.report)
		}
	})
}

// limitedCapture is what a stallwatch under a descriptor limit did.
type limitedCapture struct {
	limit   int
	log     string
	sampled int // threads_sampled in the start-up warning
	peak    int // most descriptors open while capturing
	dir     string
	info    model.Info
	notes   string
	report  string
}

// watchWithLimit runs stallwatch watch on pid under RLIMIT_NOFILE limit
// (its own: this test's stays as it is), has it capture once (SIGUSR1),
// and reads the capture.
func watchWithLimit(t *testing.T, prlimit string, pid, limit int) *limitedCapture {
	t.Helper()
	dir := t.TempDir()
	beat, out := filepath.Join(dir, "beat"), filepath.Join(dir, "out")
	if err := os.WriteFile(beat, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prlimit, fmt.Sprintf("--nofile=%d:%d", limit, limit), "--", stallwatchBin(t), "watch",
		"--pid", strconv.Itoa(pid), "--heartbeat-file", beat, "--capture-for", "1s", "--history", "2s",
		"--no-ptrace", "--out", out)
	sw := testutil.StartCmd(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stallwatch's log:\n%s", sw.Stderr())
		}
	})
	waitLog(t, sw, "msg=watching", 60*time.Second)
	c := &limitedCapture{limit: limit}

	// Capture now, counting stallwatch's descriptors meanwhile.
	peak := make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		most := 0
		for {
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", sw.Pid)); err == nil {
				most = max(most, len(ents))
			}
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	if err := sw.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitLog(t, sw, "capture written", 90*time.Second)
	close(stop)
	c.peak = <-peak
	c.log = sw.Stderr()
	c.sampled = intField(t, c.log, "threads_sampled")
	dirs, _ := filepath.Glob(filepath.Join(out, "*-signal"))
	if len(dirs) != 1 {
		t.Fatalf("capture directories %v under %s, want one", dirs, out)
	}
	c.dir = dirs[0]
	d, err := capdir.Open(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c.info = d.Info
	c.notes = strings.Join(c.info.Notes, "\n")
	b, err := os.ReadFile(filepath.Join(c.dir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	c.report = string(b)
	t.Logf("limit %d: %d threads sampled, at most %d descriptors open while capturing", limit, c.sampled, c.peak)
	return c
}

// check asserts what every limit gives: one start-up warning with the
// numbers and the fix, a capture with every thread in its snapshot,
// samples from no more threads than the plan chose (the busiest among
// them), and the plan's headroom left free.
func (c *limitedCapture) check(t *testing.T, threads, spinner int) {
	t.Helper()
	if n := strings.Count(c.log, "too few file descriptors"); n != 1 {
		t.Errorf("%d start-up warnings about file descriptors, want 1", n)
	}
	for _, w := range []string{fmt.Sprintf("threads=%d", threads), fmt.Sprintf("limit=%d", c.limit), fmt.Sprintf("hard_limit=%d", c.limit),
		"ulimit -Hn", "LimitNOFILE=", "prlimit --nofile="} {
		if !strings.Contains(c.log, w) {
			t.Errorf("start-up warning lacks %q", w)
		}
	}
	if c.sampled <= 0 || c.sampled > threads {
		t.Fatalf("threads_sampled=%d of %d", c.sampled, threads)
	}
	if bound := c.limit - sampler.DefaultFDHeadroom/2; c.peak > bound {
		t.Errorf("stallwatch held %d descriptors while capturing; the plan bounds it at %d", c.peak, bound)
	}
	for _, w := range []string{fmt.Sprintf("RLIMIT_NOFILE allows %d", c.limit), "ulimit -Hn"} {
		if !strings.Contains(c.notes, w) {
			t.Errorf("capture.json's notes lack %q: %s", w, c.notes)
		}
	}
	n := c.info.Counts
	if n.Threads != threads || n.UnsampledThreads != threads-c.sampled {
		t.Errorf("capture.json counts %d threads, %d unsampled; want %d, %d", n.Threads, n.UnsampledThreads, threads, threads-c.sampled)
	}

	c.checkSnapshot(t, threads)

	f, err := os.Open(filepath.Join(c.dir, "profile.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prof, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	tids := map[int64]int{}
	for _, s := range prof.Sample {
		if v := s.Label["thread id"]; len(v) > 0 {
			tid, _ := strconv.ParseInt(v[0], 10, 64)
			tids[tid]++
		}
	}
	if len(tids) > c.sampled {
		t.Errorf("samples from %d threads; the plan sampled %d", len(tids), c.sampled)
	}
	if tids[int64(spinner)] == 0 {
		t.Errorf("no samples of the spinning thread %d, the busiest", spinner)
	}
}

// fmtThousands writes n as the report does: 1,274.
func fmtThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// threadNamed is the thread of pid named name.
func threadNamed(t *testing.T, pid int, name string) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, e.Name()))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			tid, _ := strconv.Atoi(e.Name())
			return tid
		}
	}
	t.Fatalf("no thread %q in pid %d", name, pid)
	return 0
}

// intField reads key=N from a log.
func intField(t *testing.T, log, key string) int {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(key) + `=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no %s= in the log", key)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestWatchNoRoomToSample: a limit so low that no thread has room for one
// event once the capture's own descriptors (sampler.MinFDHeadroom) are set
// aside. watch still starts, says so once, and a capture is the thread
// snapshot alone: every thread in it, every thread counted as unsampled,
// and the notes saying why and how to fix it.
func TestWatchNoRoomToSample(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireRoot(t)
	prlimit := testutil.RequireTool(t, "prlimit")
	const idle = 20
	tg := testutil.Start(t, testutil.BuildC(t, "manythreads/manythreads.c"), strconv.Itoa(idle), "1")
	tg.WaitLine(t, "ready", 60*time.Second)
	threads := idle + 2
	const limit = 40 // stallwatch's own dozen or so, then MinFDHeadroom
	c := watchWithLimit(t, prlimit, tg.Pid, limit)
	if c.sampled != 0 || !strings.Contains(c.log, "sampling nothing") {
		t.Errorf("threads_sampled=%d; want the start-up warning to say nothing is sampled", c.sampled)
	}
	for _, w := range []string{fmt.Sprintf("RLIMIT_NOFILE allows %d", limit), "a capture holds the thread snapshot alone", "no samples: too few file descriptors", "ulimit -Hn"} {
		if !strings.Contains(c.notes, w) {
			t.Errorf("capture.json's notes lack %q: %s", w, c.notes)
		}
	}
	n := c.info.Counts
	if n.Samples != 0 || n.Threads != threads || n.UnsampledThreads != threads {
		t.Errorf("capture.json counts %d samples, %d threads, %d unsampled; want 0, %d, %d", n.Samples, n.Threads, n.UnsampledThreads, threads, threads)
	}
	c.checkSnapshot(t, threads)
	if !strings.Contains(c.report, fmt.Sprintf("%d threads not sampled (too few file descriptors", threads)) {
		t.Errorf("report.txt does not say no thread was sampled:\n%.1500s", c.report)
	}
}

// checkSnapshot asserts that the capture's thread snapshot has every
// thread.
func (c *limitedCapture) checkSnapshot(t *testing.T, threads int) {
	t.Helper()
	var dump struct {
		Threads []struct {
			TID int `json:"tid"`
		} `json:"threads"`
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "threads.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dump); err != nil {
		t.Fatal(err)
	}
	if len(dump.Threads) != threads {
		t.Errorf("the snapshot has %d threads, want %d", len(dump.Threads), threads)
	}
}

// TestRecordQuiet: record -q prints the capture directory's path and
// nothing else, even when a warning comes (too few file descriptors to
// sample every thread as asked); the warning is in capture.json's notes.
func TestRecordQuiet(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireRoot(t)
	prlimit := testutil.RequireTool(t, "prlimit")
	tg := testutil.Start(t, testutil.BuildC(t, "manythreads/manythreads.c"), "20", "1")
	tg.WaitLine(t, "ready", 60*time.Second)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(prlimit, "--nofile=80:80", "--", stallwatchBin(t), "record", "-q", "-d", "300ms", "-p", strconv.Itoa(tg.Pid), "--out", out)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("record -q: %v; stderr:\n%s", err, stderr.String())
	}
	dir := strings.TrimSuffix(stdout.String(), "\n")
	if strings.Contains(dir, "\n") || !strings.HasPrefix(dir, out+"/") {
		t.Errorf("stdout is not the capture directory alone: %q", stdout.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("record -q wrote to standard error:\n%s", stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "capture.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "RLIMIT_NOFILE allows 80") {
		t.Errorf("capture.json's notes do not keep the warning record -q did not print:\n%.2000s", b)
	}
}
