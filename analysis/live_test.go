package analysis_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/version"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// The findings on real targets. Each scenario (scenarios.go's table)
// starts a target of the project's own (testdata/), brings it to the
// state a finding is about, and captures it as `stallwatch record
// --snapshot` does (the demo as `stallwatch watch` does, with its flight
// recorder, at the stall); the capture is read back as `stallwatch
// report` reads it and checked from its content alone. With
// -record-corpus the capture is also kept in testdata/captures/<name>,
// where TestCorpus checks it again with no root and no live process.

var recordCorpus = flag.Bool("record-corpus", false, "keep each live scenario's capture in testdata/captures/NAME (make corpus)")

func TestFindingsLive(t *testing.T) {
	if *recordCorpus {
		favour(t)
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			dir := sc.run(t)
			c, err := report.ReadCapture(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("findings:\n%s", findingsText(c))
			sc.expect(t, c)
			if *recordCorpus && !t.Failed() {
				keep(t, sc, dir)
			}
		})
	}
}

// keep copies a capture directory into the corpus as testdata/captures/NAME,
// with the command that made it beside it. The renderings (report.txt,
// report.html) are left out: the renderings' tests make them from the
// files kept.
func keep(t *testing.T, sc scenario, dir string) {
	t.Helper()
	dst := filepath.Join(corpusDir(t), sc.name)
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{capdir.FileInfo, capdir.FileProfile, capdir.FileThreads, capdir.FileThreadJSON} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var uts syscall.Utsname
	syscall.Uname(&uts)
	made := fmt.Sprintf(`Made by a real capture of a real target, by

  STALLWATCH_REQUIRE_PERF=1 go test ./analysis -run 'TestFindingsLive/%s$' -record-corpus -count=1

as root (make corpus makes them all), on %s, %s (stallwatch %s).
The target: %s.
It was recorded with the test's scheduler group at nice -20 (favour), so
that other work on the test host took no CPU from it, as on a quiet host.
The renderings (report.txt, report.html) are left out: package report's
tests make them from these files; first-screen.txt is the first screen of
report.txt as they render it (go test ./report -run TestCorpus -update
writes it again after a change to the renderings, go test ./analysis -run
TestCorpus -update the findings in capture.json after a change to the
findings; make corpus-update does both).
`, sc.name, time.Now().UTC().Format("2006-01-02"), kernel(), version.String(), sc.about)
	if err := os.WriteFile(filepath.Join(dst, madeBy), []byte(made), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kept in %s", dst)
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return "Linux " + strings.TrimSpace(string(b))
}

// session opens a capture session on pid with a short flight recorder, as
// `stallwatch watch` does before a stall.
func session(t *testing.T, pid int, cfg capture.Config) *capture.Session {
	t.Helper()
	testutil.EndToEnd(t)
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	cfg.PID = pid
	cfg.Out = t.TempDir()
	cfg.Snapshot = true
	if cfg.Freq == 0 {
		cfg.Freq = 499
	}
	if cfg.BaselineFreq == 0 && !cfg.NoFlightRecorder {
		cfg.BaselineFreq = 97
	}
	if cfg.History == 0 {
		cfg.History = 3 * time.Second
	}
	if cfg.CaptureFor == 0 {
		cfg.CaptureFor = time.Second
	}
	s, err := capture.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// captureNow triggers a capture as the watchdog does and returns its
// directory.
func captureNow(t *testing.T, s *capture.Session, tr model.Trigger) string {
	t.Helper()
	if tr.Kind == "" {
		tr.Kind = model.Stall
	}
	if tr.Reason == "" {
		tr.Reason = "test: " + t.Name()
	}
	res, err := s.Capture(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	return res.Dir
}

// record captures pid once, as `stallwatch record --snapshot` does: no
// flight recorder, a second of sampling and a thread snapshot.
func record(t *testing.T, pid int) string {
	t.Helper()
	s := session(t, pid, capture.Config{NoFlightRecorder: true})
	return captureNow(t, s, model.Trigger{Kind: model.Manual, Reason: "stallwatch record --snapshot"})
}

// waitState waits until thread tid of pid is in one of states.
func waitState(t *testing.T, pid int, tid int, states string) {
	t.Helper()
	err := testutil.Eventually(20*time.Second, func() bool {
		st, err := procfs.ReadStatus(pid, tid)
		return err == nil && strings.IndexByte(states, st.State) >= 0
	})
	if err != nil {
		st, _ := procfs.ReadStatus(pid, tid)
		t.Fatalf("thread %d of %d is in state %c, want one of %q", tid, pid, st.State, states)
	}
}

// liveTID finds a thread of pid by name.
func liveTID(t *testing.T, pid int, name string) int {
	t.Helper()
	var tid int
	err := testutil.Eventually(10*time.Second, func() bool {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, e := range ents {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, e.Name()))
			if err == nil && strings.TrimSpace(string(b)) == name {
				fmt.Sscan(e.Name(), &tid)
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("pid %d has no thread %q", pid, name)
	}
	return tid
}

// killChildren kills the children of pid (the vfork child, which holds its
// parent in D state).
func killChildren(pid int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		var c int
		fmt.Sscan(f, &c)
		if c > 0 {
			syscall.Kill(c, syscall.SIGKILL)
		}
	}
}

// startNodeServer starts httpblock.js and blocks its event loop with a
// request to /block.
func startNodeServer(t *testing.T, flags ...string) *testutil.Target {
	t.Helper()
	node := testutil.RequireTool(t, "node")
	cmd := exec.Command(node, append(flags, testutil.Testdata(t, "node", "httpblock.js"))...)
	cmd.Dir = t.TempDir() // perf maps and jitdumps go to /tmp and here
	tg := testutil.StartCmd(t, cmd)
	line := tg.WaitLine(t, "ready", 20*time.Second)
	var pid, port int
	fmt.Sscanf(line, "ready %d %d", &pid, &port)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/block", port), nil)
	go http.DefaultClient.Do(req) // it never answers
	// The event loop is blocked once the main thread stays on the CPU.
	start, _ := testutil.CPUTime(tg.Pid)
	testutil.WaitCPU(t, tg.Pid, start+300*time.Millisecond, 30*time.Second)
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)) })
	return tg
}

// startPython313 starts pyhot.py under CPython 3.13 with -X mode (perf or
// perf_jit).
func startPython313(t *testing.T, mode string) *testutil.Target {
	t.Helper()
	py := "/root/.pyenv/versions/3.13.0/bin/python3"
	if _, err := os.Stat(py); err != nil {
		testutil.Skip(t, "no CPython 3.13 with symbols at %s: %v", py, err)
	}
	tg := testutil.StartCmd(t, exec.Command(py, "-X", mode, testutil.Testdata(t, "stalls", "pyhot.py")))
	tg.WaitLine(t, "ready", 20*time.Second)
	t.Cleanup(func() {
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid))
		os.Remove(fmt.Sprintf("/tmp/jit-%d.dump", tg.Pid))
	})
	return tg
}

// favour gives the scenarios' targets the CPU a quiet host would while
// the corpus is recorded, so that a busy test host does not starve the
// threads the stored captures are about (each MADE-BY says so): the
// test's session's scheduler group (its autogroup, which its targets
// share) gets the highest priority, nice -20, until the test ends. Live
// runs leave the host as it is: their expectations follow what the
// threads got.
func favour(t *testing.T) {
	t.Helper()
	const group = "/proc/self/autogroup"
	if err := os.WriteFile(group, []byte("-20"), 0); err != nil {
		t.Fatalf("%s: %v (recording the corpus needs root and a kernel with autogroups)", group, err)
	}
	t.Cleanup(func() { os.WriteFile(group, []byte("0"), 0) })
}

// fileAge is how long ago a file last changed.
func fileAge(path string) time.Duration {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return time.Since(st.ModTime())
}
