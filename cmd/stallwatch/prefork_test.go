package main

import (
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

// TestDaemonPrefork: a prefork server (a real Python process) binds one
// socket and forks two workers that send its DogStatsD metric through it;
// the parent sits in pause(). The workers, which execute nothing, are
// watched at once (the process connector's fork events, not the scan,
// here ten minutes away), and each beats with its own datagrams; the
// parent, which sends one datagram through the shared socket when told
// (once it is watched: the datagram that gave the socket its port may
// have gone out before the daemon saw the process start, on a loaded
// host), beats once and stalls while the workers go on.
func TestDaemonPrefork(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.RequireTool(t, "/usr/bin/python3")
	tag := marker()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	script, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "watchdog", "dogstatsd", "tap", "testdata", "udpsend.py"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "udpsend-"+tag+".py")
	if err := os.WriteFile(path, script, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newDaemonEnv(t, `
out: OUT
rules:
  - name: prefork
    match: {cmdline: 'udpsend-`+tag+`'}
    heartbeat-tap: udp://:`+port+`
    metric: '`+tag+`.heartbeat'
    stall-after: 2s
    max-captures: 0
`)
	e.start(t, "--scan-interval", "1m") // the backstop scan: ten minutes
	srv := testutil.StartCmd(t, exec.Command(py, path, "--family", "4", "--to", "127.0.0.1", "--tap-port", port,
		"--metric", tag+".heartbeat", "--interval", "0.05", "--fork", "2"))
	srv.WaitLine(t, "ready ", 20*time.Second)
	var workers []int
	for _, f := range strings.Fields(strings.TrimPrefix(srv.WaitLine(t, "workers ", 20*time.Second), "workers ")) {
		n, _ := strconv.Atoi(f)
		workers = append(workers, n)
	}
	for _, pid := range workers {
		e.waitTarget(t, pid, "healthy", 30*time.Second, healthy)
	}
	// The parent sends one datagram, then nothing: it stalls, and the
	// workers go on.
	if ts := e.target(t, srv.Pid); ts == nil {
		t.Fatalf("the parent %d is not watched", srv.Pid)
	}
	if err := srv.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	srv.WaitLine(t, "sent", 20*time.Second)
	e.waitTarget(t, srv.Pid, "stalled", 30*time.Second, func(ts *daemon.TargetStatus) bool { return ts != nil && ts.State == "stalled" })
	for _, pid := range workers {
		if ts := e.target(t, pid); ts == nil || ts.State != "healthy" {
			t.Errorf("worker %d, its sibling beating on the same socket: %+v", pid, ts)
		}
	}
}
