package hook

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

func wait(t *testing.T, r *Runner, cond func(Stats) bool) Stats {
	t.Helper()
	if err := testutil.Eventually(20*time.Second, func() bool { return cond(r.Stats()) }); err != nil {
		t.Fatalf("hook stats %+v", r.Stats())
	}
	return r.Stats()
}

// TestEnvironment: the hook sees the event in its environment, exactly,
// even when the target chose a name meant to break a shell command.
func TestEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	r := New(Config{Logger: slog.New(slog.DiscardHandler)})
	env := Env{Event: "capture", Dir: "/var/lib/stallwatch/20260105T143012.345Z-4242-stall", PID: 4242,
		Process: `bank"; touch pwned #`, Trigger: "stall", Stall: 10234 * time.Millisecond,
		TopFinding: "DEADLOCK: tid 11 waits for tid 12 waits for tid 11.", Service: "bank", Host: "web-1"}
	r.Start("on-capture", "env | grep -E '^STALLWATCH_(EVENT|CAPTURE_DIR|PID|PROCESS|TRIGGER|STALL_SECONDS|TOP_FINDING|SERVICE|HOST)=' | sort > '"+out+"'", env)
	wait(t, r, func(s Stats) bool { return s.Succeeded == 1 })
	r.Close(time.Second)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"STALLWATCH_CAPTURE_DIR=/var/lib/stallwatch/20260105T143012.345Z-4242-stall",
		"STALLWATCH_EVENT=capture",
		"STALLWATCH_HOST=web-1",
		"STALLWATCH_PID=4242",
		`STALLWATCH_PROCESS=bank"; touch pwned #`,
		"STALLWATCH_SERVICE=bank",
		"STALLWATCH_STALL_SECONDS=10.234",
		"STALLWATCH_TOP_FINDING=DEADLOCK: tid 11 waits for tid 12 waits for tid 11.",
		"STALLWATCH_TRIGGER=stall",
	}
	if got := strings.Split(strings.TrimSpace(string(data)), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("environment:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := os.Stat("pwned"); err == nil {
		t.Error("a process name ran as a command")
	}
}

// TestOutputLogged: what a hook prints goes to the log, and a failure
// says its status.
func TestOutputLogged(t *testing.T) {
	var logs testutil.Buffer
	r := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r.Start("on-recover", "echo posted to chat; echo curl: timeout >&2; exit 3", Env{Event: "recover", PID: 7})
	wait(t, r, func(s Stats) bool { return s.Failed == 1 })
	r.Close(time.Second)
	out := logs.String()
	for _, w := range []string{`line="posted to chat"`, `line="curl: timeout"`, `msg="hook failed"`, `status="exit 3"`, "hook=on-recover"} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %s:\n%s", w, out)
		}
	}
}

// TestHangingHookKilled: a hook that hangs, ignores SIGTERM and leaves a
// child behind is killed, whole group, at its bound; Start never waits
// for it.
func TestHangingHookKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	var logs testutil.Buffer
	r := New(Config{Timeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	start := time.Now()
	r.Start("on-capture", "trap '' TERM; sleep 1000 & echo $$ $! > '"+pidFile+"'; wait", Env{Event: "capture", PID: 1})
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Start waited %v for the hook", d)
	}
	st := wait(t, r, func(s Stats) bool { return s.Killed == 1 })
	if st.Succeeded+st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		if err := testutil.Eventually(5*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }); err != nil {
			t.Errorf("pid %d of the hook still runs", pid)
		}
	}
	if !strings.Contains(logs.String(), "hook killed: it ran longer than its bound") {
		t.Errorf("the kill was not said:\n%s", logs.String())
	}
	r.Close(time.Second)
}

// TestBoundedConcurrency: hooks beyond MaxRunning wait their turn; none
// is lost.
func TestBoundedConcurrency(t *testing.T) {
	dir := t.TempDir()
	r := New(Config{MaxRunning: 2, Logger: slog.New(slog.DiscardHandler)})
	for i := 0; i < 6; i++ {
		r.Start("on-capture", "touch '"+filepath.Join(dir, strconv.Itoa(i))+"'", Env{})
	}
	wait(t, r, func(s Stats) bool { return s.Succeeded == 6 })
	r.Close(time.Second)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 6 {
		t.Errorf("%d hooks ran, want 6", len(ents))
	}
}

// TestClose: stopping stallwatch kills a hook still running after the
// grace, and runs no new one.
func TestClose(t *testing.T) {
	var logs testutil.Buffer
	r := New(Config{Timeout: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r.Start("on-capture", "sleep 1000", Env{})
	wait(t, r, func(s Stats) bool { return s.Started == 1 })
	start := time.Now()
	r.Close(100 * time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	r.Start("on-capture", "true", Env{})
	if r.Stats().Started != 1 {
		t.Error("a hook started after Close")
	}
	if !strings.Contains(logs.String(), "hook killed: stallwatch is stopping") {
		t.Errorf("log:\n%s", logs.String())
	}
}

// TestBackgroundChildrenEnd: a hook that leaves `sleep 300 &` behind and
// exits takes it with it (one left per capture would outlive stallwatch);
// one started in a session of its own (setsid), on purpose, stays.
func TestBackgroundChildrenEnd(t *testing.T) {
	dir := t.TempDir()
	bg, detached := filepath.Join(dir, "bg"), filepath.Join(dir, "detached")
	var logs testutil.Buffer
	r := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r.Start("on-capture", "sleep 300 & echo $! > '"+bg+"'; setsid sleep 300 >/dev/null 2>&1 & echo $! > '"+detached+"'", Env{Event: "capture", PID: 1})
	wait(t, r, func(s Stats) bool { return s.Succeeded == 1 })
	r.Close(time.Second)
	pidOf := func(path string) int {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	left, kept := pidOf(bg), pidOf(detached)
	defer syscall.Kill(kept, syscall.SIGKILL)
	defer syscall.Kill(left, syscall.SIGKILL)
	if alive(left) {
		t.Errorf("the hook's background sleep (pid %d) outlived it; log:\n%s", left, logs.String())
	}
	if !alive(kept) {
		t.Errorf("the sleep the hook detached with setsid (pid %d) was ended", kept)
	}
	if !strings.Contains(logs.String(), "hook left processes behind") || !strings.Contains(logs.String(), "processes=1") {
		t.Errorf("no word of what the hook left behind; log:\n%s", logs.String())
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && !strings.HasPrefix(string(b[i+1:]), " Z")
}
