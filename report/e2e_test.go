package report_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// The end-to-end tests of the findings run real targets under a real
// capture (perf_event_open, the flight recorder, a ptrace snapshot) and
// read the capture directory back as `stallwatch report` does.

// session opens a capture session on pid with a short flight recorder, as
// `stallwatch watch` does before a stall.
func session(t *testing.T, pid int, cfg capture.Config) *capture.Session {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: skipped by -short")
	}
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

// captureNow triggers a capture as the watchdog does on a stall and reads
// the directory back.
func captureNow(t *testing.T, s *capture.Session, tr model.Trigger) (*report.Capture, string) {
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
	c, err := report.ReadCapture(context.Background(), res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, res.Dir
}

func findingOf(c *report.Capture, k model.FindingKind) (model.Finding, bool) {
	for _, f := range c.Info.Findings {
		if f.Kind == k {
			return f, true
		}
	}
	return model.Finding{}, false
}

// mustFinding fails the test when the capture lacks a finding of kind k.
func mustFinding(t *testing.T, c *report.Capture, k model.FindingKind) model.Finding {
	t.Helper()
	f, ok := findingOf(c, k)
	if !ok {
		t.Fatalf("no %s finding; findings:\n%s", k, findingsText(c))
	}
	return f
}

func mustNotFinding(t *testing.T, c *report.Capture, k model.FindingKind) {
	t.Helper()
	if f, ok := findingOf(c, k); ok {
		t.Errorf("a %s finding where there should be none: %s\nall findings:\n%s", k, f.Summary, findingsText(c))
	}
}

func findingsText(c *report.Capture) string {
	var sb strings.Builder
	for _, f := range c.Info.Findings {
		sb.WriteString("  [" + string(f.Severity) + " " + string(f.Kind) + "] " + f.Summary + "\n      " + f.Detail + "\n")
	}
	return sb.String()
}

// tidOf finds a thread of pid by name.
func tidOf(t *testing.T, pid int, name string) int {
	t.Helper()
	var tid int
	err := testutil.Eventually(10*time.Second, func() bool {
		ents, _ := os.ReadDir(filepath.Join("/proc", itoa(pid), "task"))
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "task", e.Name(), "comm"))
			if err == nil && strings.TrimSpace(string(b)) == name {
				tid = atoi(e.Name())
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

// fileAge is how long ago a file last changed.
func fileAge(path string) time.Duration {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return time.Since(st.ModTime())
}

func hasTID(f model.Finding, tid int) bool { return slices.Contains(f.TIDs, tid) }
