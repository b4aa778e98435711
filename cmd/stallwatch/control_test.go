package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/daemon"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestControlSocketHostile: the control socket's directory is 0700 and
// the socket 0600, so user nobody cannot connect (EACCES); a 10 MB
// request is refused; 1,000 idle connections do not keep status from
// answering, and their descriptors come back once they close.
func TestControlSocketHostile(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Nobody(t)
	py := testutil.RequireTool(t, "/usr/bin/python3")
	e := newDaemonEnv(t, "out: OUT\nrules:\n  - name: none\n    match: {cmdline: '^"+marker()+"$'}\n    heartbeat-proc: true\n")
	e.start(t)
	for path, want := range map[string]os.FileMode{filepath.Dir(e.socket): 0o700, e.socket: 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %v", path, st.Mode(), err, want)
		}
	}
	// nobody, as anyone on the host would.
	c := exec.Command(py, "-c", `
import os, pwd, socket, sys
pw = pwd.getpwnam("nobody")
os.setgroups([]); os.setgid(pw.pw_gid); os.setuid(pw.pw_uid)
try:
    socket.socket(socket.AF_UNIX).connect(sys.argv[1])
    print("connected")
except PermissionError:
    print("EACCES")
except OSError as e:
    print("other", e)
`, e.socket)
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "EACCES" {
		t.Errorf("nobody connecting: %q %v, want EACCES", out, err)
	}
	// 10 MB with no end of line.
	conn, err := net.Dial("unix", e.socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = conn.Write(make([]byte, 10<<20)) }()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	n, _ := conn.Read(buf)
	conn.Close()
	if !strings.Contains(string(buf[:n]), "at most 4096 bytes") {
		t.Errorf("a 10 MB request was answered %q", buf[:n])
	}
	// 1,000 idle connections, and status beside them.
	before := openFDs(e.sw.Pid)
	var idle []net.Conn
	for range 1000 {
		c, err := net.Dial("unix", e.socket)
		if err != nil {
			t.Fatalf("connection %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	start := time.Now()
	_, err = daemon.Dial(ctx, e.socket, daemon.Request{Op: "status"})
	cancel()
	if err != nil {
		t.Fatalf("status beside 1,000 idle connections: %v", err)
	}
	t.Logf("status beside 1,000 idle connections answered in %v; the daemon held %d descriptors", time.Since(start), openFDs(e.sw.Pid))
	for _, c := range idle {
		c.Close()
	}
	if err := testutil.Eventually(30*time.Second, func() bool { return openFDs(e.sw.Pid) <= before }); err != nil {
		t.Errorf("descriptors: %d after the connections closed, %d before", openFDs(e.sw.Pid), before)
	}
	if err := e.sw.Cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the daemon is gone: %v", err)
	}
}

// TestDaemonSIGHUPStorm: 300 SIGHUPs, each after a configuration written
// half (cut anywhere, in place, as an editor saving slowly leaves it):
// every one that cannot be used is refused, the rules in force go on,
// and the whole one written last is put in force.
func TestDaemonSIGHUPStorm(t *testing.T) {
	testutil.RequireRoot(t)
	config := func(perHour int) string {
		return "out: OUT\nmax-captures-per-hour: " + strconv.Itoa(perHour) + "\nrules:\n  - name: none\n    match: {cmdline: '^nothing-here$', user: root}\n    heartbeat-proc: true\n    stall-after: 3s\n"
	}
	e := newDaemonEnv(t, config(30))
	e.start(t)
	whole := strings.ReplaceAll(config(7), "OUT", e.out)
	for i := range 300 {
		cut := whole[:(i*7919)%len(whole)]
		f, err := os.OpenFile(e.config, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(cut)
		f.Close()
		if err := e.sw.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatalf("SIGHUP %d: the daemon is gone: %v; log:\n%s", i, err, e.sw.Stderr())
		}
	}
	if st := e.status(t); st.MaxPerHour != 30 && st.MaxPerHour != 7 {
		t.Errorf("after 300 half-written configurations: max_captures_per_hour %d", st.MaxPerHour)
	}
	e.write(t, config(7))
	_ = e.sw.Cmd.Process.Signal(syscall.SIGHUP)
	if err := testutil.Eventually(30*time.Second, func() bool { return e.status(t).MaxPerHour == 7 }); err != nil {
		t.Errorf("the whole configuration written last was not put in force; log:\n%s", e.sw.Stderr())
	}
	if !strings.Contains(e.sw.Stderr(), "configuration refused") {
		t.Errorf("no half-written configuration was refused; log:\n%s", e.sw.Stderr())
	}
}
