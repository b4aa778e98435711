package notify

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/spool"
)

// queueCaptures writes a capture for each pid and queues its upload, in
// that order.
func queueCaptures(t *testing.T, s *Stack, pids ...int) map[int]string {
	t.Helper()
	dirs := map[int]string{}
	for _, pid := range pids {
		now := time.Now()
		info := capdir.NewInfo(model.Target{PID: pid}, model.Trigger{Kind: model.Stall, At: now})
		info.Start, info.End = now.Add(-time.Second), now
		p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu-samples", Unit: "count"}}}
		dirs[pid] = intaketest.WriteCapture(t, t.TempDir(), info, p, nil)
		if err := s.Queue.Add(spool.Item{Key: dirs[pid], Size: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return dirs
}

// pidsOf lists the process_id tag of each upload, in order.
func pidsOf(ups []*intaketest.Upload) []string {
	var out []string
	for _, u := range ups {
		v, _ := u.Tag("process_id")
		out = append(out, v)
	}
	return out
}

func queueStack(t *testing.T, intake *intaketest.Server, timeout time.Duration, logs *testutil.Buffer) *Stack {
	t.Helper()
	s, err := Setup(Options{Upload: intake.URL, NoAlerts: true, QueueDir: t.TempDir(), UploadTimeout: timeout,
		Getenv: func(string) string { return "" }, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(time.Second) })
	return s
}

// TestQueueFailingHeadHoldsNoOne: an agent (the stand-in intake) answers
// 500 for the oldest profile only. The two queued after it — the stall's
// among them — are sent meanwhile, in the order they were queued; the
// first waits out its own backoff and is sent once the agent takes it.
func TestQueueFailingHeadHoldsNoOne(t *testing.T) {
	intake := intaketest.Start(t)
	intake.Decide(func(u *intaketest.Upload) (int, time.Duration) {
		if pid, _ := u.Tag("process_id"); pid == "1001" {
			return http.StatusInternalServerError, 0
		}
		return 0, 0
	})
	var logs testutil.Buffer
	s := queueStack(t, intake, 0, &logs)
	dirs := queueCaptures(t, s, 1001, 1002, 1003)
	got := intake.Wait(t, 2, 20*time.Second)
	if p := pidsOf(got); strings.Join(p, ",") != "1002,1003" {
		t.Errorf("sent %v while the first failed, want 1002 then 1003", p)
	}
	if !s.Queue.Pending(dirs[1001]) {
		t.Error("the failing profile left the queue")
	}
	intake.Decide(nil) // the agent mends
	got = intake.Wait(t, 3, 20*time.Second)
	if p := pidsOf(got); p[2] != "1001" {
		t.Errorf("sent %v, want 1001 last, once the agent took it", p)
	}
}

// TestQueueLateAnswer: an agent that takes a profile whole and answers
// after the upload's timeout. It is sent once (the agent has it), counted
// and said, and the next one goes on.
func TestQueueLateAnswer(t *testing.T) {
	const timeout = 500 * time.Millisecond
	intake := intaketest.Start(t)
	intake.Decide(func(u *intaketest.Upload) (int, time.Duration) {
		if pid, _ := u.Tag("process_id"); pid == "1001" {
			return http.StatusOK, 3 * timeout
		}
		return 0, 0
	})
	var logs testutil.Buffer
	s := queueStack(t, intake, timeout, &logs)
	dirs := queueCaptures(t, s, 1001, 1002)
	if err := testutil.Eventually(20*time.Second, func() bool {
		return !s.Queue.Pending(dirs[1001]) && !s.Queue.Pending(dirs[1002])
	}); err != nil {
		t.Fatalf("still queued: %+v; tries %v; log:\n%s", s.Queue.Stats(), pidsOf(intake.Tries()), logs.String())
	}
	n := 0
	for _, p := range pidsOf(intake.Tries()) {
		if p == "1001" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the late-answered profile was posted %d times, want once", n)
	}
	if st := s.Queue.Stats(); st.Unconfirmed != 1 || st.Delivered != 1 {
		t.Errorf("stats %+v, want 1 unconfirmed and 1 delivered", st)
	}
	if !strings.Contains(logs.String(), "not answered in time") || !strings.Contains(logs.String(), "no answer within "+timeout.String()) {
		t.Errorf("the late answer was not said; log:\n%s", logs.String())
	}
}
