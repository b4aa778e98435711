package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestDaemonBudgetSpam: a rule selects by command line, which anyone
// chooses. User nobody starts six idle processes named as the service
// (exec -a), each a stall; they are captured within nobody's share of the
// host's hour, and the real service, run by root and then frozen, is
// still captured. Captures that wrote nothing are not counted.
func TestDaemonBudgetSpam(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	uid, gid := testutil.Nobody(t)
	name := "myapp-server-" + marker()
	e := newDaemonEnv(t, `
out: OUT
max-concurrent-captures: 2
max-captures-per-hour: 4
defaults:
  stall-after: 1s
rules:
  - name: myapp
    match:
      cmdline: '^`+name+`'
    heartbeat-proc: true
    capture-for: 200ms
    baseline-freq: 0
    recapture-after: 1h
`)
	service := exec.Command(beaterPath(t), "-interval", "50ms")
	service.Args[0] = name
	svc := testutil.StartCmd(t, service)
	svc.WaitLine(t, "ready", 20*time.Second)
	e.start(t)
	e.waitTarget(t, svc.Pid, "healthy", 30*time.Second, healthy)

	var spam []*testutil.Target
	for range 6 {
		c := exec.Command("/bin/sleep", "120")
		c.Args[0] = name
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		spam = append(spam, testutil.StartCmd(t, c))
	}
	// Each of the six is tried once (recapture-after 1h).
	if err := testutil.Eventually(60*time.Second, func() bool {
		log := e.sw.Stderr()
		return strings.Count(log, `msg="capture written"`)+strings.Count(log, `msg="capture failed"`) >= 6
	}); err != nil {
		t.Fatalf("nobody's six stalls were not all tried; log:\n%s", e.sw.Stderr())
	}
	// nobody's share of 4 is 2: two captures written, the others refused
	// by name.
	if n := strings.Count(e.sw.Stderr(), "of user 65534's processes"); n != 4 {
		t.Errorf("%d of nobody's stalls refused for its share, want 4", n)
	}
	written := func() int {
		n := 0
		for _, s := range spam {
			n += len(captureDirs(t, e.out, s.Pid, "stall"))
		}
		return n
	}
	_ = testutil.Eventually(30*time.Second, func() bool { return written() >= 2 })
	if written := written(); written != 2 {
		t.Errorf("%d of nobody's stalls captured, want its share of 2; log:\n%s", written, e.sw.Stderr())
	}

	if err := syscall.Kill(svc.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(svc.Pid, syscall.SIGCONT)
	if err := testutil.Eventually(60*time.Second, func() bool { return len(captureDirs(t, e.out, svc.Pid, "stall")) == 1 }); err != nil {
		t.Fatalf("the service's stall was not captured; log:\n%s", e.sw.Stderr())
	}
	// Counted when the capture returns, a moment after its directory
	// appears.
	if err := testutil.Eventually(10*time.Second, func() bool { return e.status(t).CapturesLastHour == 3 }); err != nil {
		t.Errorf("%d stall captures counted in the last hour, want the 3 written", e.status(t).CapturesLastHour)
	}
}

// TestDaemonCheckWarnsChosenByAnyone: --check says which rules select by
// what any user chooses (a command line, an executable's path) alone.
func TestDaemonCheckWarnsChosenByAnyone(t *testing.T) {
	for _, c := range []struct {
		match string
		warn  bool
	}{
		{"{cmdline: myapp-server}", true},
		{"{exe: /usr/bin/myapp}", true},
		{"{cmdline: myapp-server, user: root}", false},
		{"{pidfile: /run/myapp.pid}", false},
		{"{exe: /usr/bin/myapp, container: 0123456789ab}", false},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte("rules:\n  - name: a\n    match: "+c.match+"\n    heartbeat-proc: true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		if code := run([]string{"daemon", "--config", path, "--check"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d\n%s", c.match, code, stderr.String())
		}
		warned := strings.Contains(stdout.String(), "warning: rule a (line 2) selects by command line or executable alone")
		if warned != c.warn {
			t.Errorf("match %s: warned %v, want %v:\n%s", c.match, warned, c.warn, stdout.String())
		}
	}
}
