package tap

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procwatch"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd"
)

// udpsend starts testdata/udpsend.py (a real Python process) with args,
// through prefix (ip netns exec …) when given, and waits for its "ready
// PORT" line: the port it sends from.
func udpsend(t *testing.T, prefix []string, args ...string) (*testutil.Target, int) {
	t.Helper()
	py := testutil.RequireTool(t, "/usr/bin/python3")
	script, err := os.ReadFile("testdata/udpsend.py")
	if err != nil {
		t.Fatal(err)
	}
	// A copy every user can read: the sender may drop to nobody.
	path := testutil.SharedTempDir(t) + "/udpsend.py"
	if err := os.WriteFile(path, script, 0o644); err != nil {
		t.Fatal(err)
	}
	argv := append(append(append([]string{}, prefix...), py, path), args...)
	tg := testutil.StartCmd(t, exec.Command(argv[0], argv[1:]...))
	line := tg.WaitLine(t, "ready ", 20*time.Second)
	port, err := strconv.Atoi(strings.TrimPrefix(line, "ready "))
	if err != nil {
		t.Fatalf("udpsend: %q", line)
	}
	return tg, port
}

// syncTap is the test's own heartbeat on a tap: a datagram the test sends
// and sees beat has been read after everything sent before it.
type syncTap struct {
	conn  net.Conn
	beats *beats
}

func newSyncTap(t *testing.T, ctx context.Context, wg *sync.WaitGroup, tp *Tap) *syncTap {
	t.Helper()
	c, err := net.Dial("udp4", "127.0.0.1:"+strconv.Itoa(int(tp.Port())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := dogstatsd.NewMetricMatcher("harden.marker", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &syncTap{conn: c, beats: runSource(t, ctx, wg, tp.Source(os.Getpid(), m))}
}

// wait sends a marker and waits until the tap has read it.
func (s *syncTap) wait(t *testing.T) {
	t.Helper()
	want := s.beats.n.Load() + 1
	if err := testutil.Eventually(20*time.Second, func() bool {
		if s.beats.n.Load() >= want {
			return true
		}
		_, _ = s.conn.Write([]byte("harden.marker:1|c"))
		return false
	}); err != nil {
		t.Fatal("the tap never read the test's own marker datagram")
	}
}

// TestForgedBeats: an unprivileged process (nobody) that knows a
// watched process's metric and port — /proc/net/udp and /proc/PID/cgroup
// are world-readable — sends datagrams shaped to pass for the watched
// process's while it is frozen: from the same port in the other address
// family, or with the container field of its cgroup. None of them beats.
func TestForgedBeats(t *testing.T) {
	testutil.Nobody(t)
	cases := []struct {
		name      string
		victim    []string // udpsend arguments of the watched process
		container bool     // the victim runs in a container's cgroup
		forger    func(port int, container string) []string
	}{
		{
			name:   "ipv6 v6only on [::1] over an IPv4 wildcard socket",
			victim: []string{"--family", "4", "--to", "127.0.0.1"},
			forger: func(port int, _ string) []string {
				return []string{"--family", "6", "--v6only", "--bind", "::1", "--port", strconv.Itoa(port), "--to", "::1"}
			},
		},
		{
			name:   "ipv4 over an IPv6-only wildcard socket",
			victim: []string{"--family", "6", "--v6only", "--bind", "::", "--to", "::1"},
			forger: func(port int, _ string) []string {
				return []string{"--family", "4", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--to", "127.0.0.1"}
			},
		},
		{
			name:      "the container field of the victim's cgroup",
			victim:    []string{"--family", "4", "--connect", "--to", "127.0.0.1"},
			container: true,
			forger: func(_ int, container string) []string {
				return []string{"--family", "4", "--to", "127.0.0.1", "--container", container}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			port := freeUDPPort(t)
			tp := openTap(t, port)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			go tp.Run(ctx)
			mark := newSyncTap(t, ctx, &wg, tp)

			victim, vport := udpsend(t, nil, append(c.victim, "--tap-port", strconv.Itoa(port), "--metric", "victim.heartbeat")...)
			var cgroup string
			if c.container {
				cgroup = containerField(t, victim.Pid)
			}
			m, _ := dogstatsd.NewMetricMatcher("victim.heartbeat", nil)
			got := runSource(t, ctx, &wg, tp.Source(victim.Pid, m))
			if err := testutil.Eventually(20*time.Second, func() bool { return got.n.Load() >= 3 }); err != nil {
				t.Fatalf("the victim's own datagrams beat %d times: %+v", got.n.Load(), tp.Stats())
			}
			frozen := freeze(t, victim, mark, got)

			before := tp.Stats().Packets
			forger, _ := udpsend(t, nil, append(c.forger(vport, cgroup), "--user", "nobody", "--count", "40", "--interval", "0.01",
				"--tap-port", strconv.Itoa(port), "--metric", "victim.heartbeat")...)
			forger.WaitLine(t, "done", 30*time.Second)
			mark.wait(t)
			if seen := tp.Stats().Packets - before; seen < 40 {
				t.Fatalf("the tap saw %d of the 40 forged datagrams", seen)
			}
			if n := got.n.Load(); n != frozen {
				t.Errorf("%d forged datagrams beat the frozen victim (port %d)", n-frozen, vport)
			}
		})
	}
}

// freeze stops a sender and returns its beats once the tap has read
// everything it sent.
func freeze(t *testing.T, tg *testutil.Target, mark *syncTap, b *beats) int64 {
	t.Helper()
	if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(tg.Pid, syscall.SIGCONT) })
	mark.wait(t)
	return b.n.Load()
}

// containerField moves pid into a cgroup named as docker names a
// container's (in the unified hierarchy, where its /proc/PID/cgroup
// shows it) and returns the DogStatsD container field its client would
// send, read the way anyone can: from /proc/PID/cgroup.
func containerField(t *testing.T, pid int) string {
	t.Helper()
	root := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(root + "/cgroup.procs"); err != nil {
		root = "/sys/fs/cgroup"
	}
	top := fmt.Sprintf("%s/sw-harden-%d", root, os.Getpid())
	dir := top + "/docker-" + strings.Repeat("5a", 32) + ".scope"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		testutil.Skip(t, "no cgroup to make here: %v", err)
	}
	t.Cleanup(func() {
		// The processes go back to the root before the directories go.
		if b, err := os.ReadFile(dir + "/cgroup.procs"); err == nil {
			for _, p := range strings.Fields(string(b)) {
				_ = os.WriteFile(root+"/cgroup.procs", []byte(p), 0)
			}
		}
		_ = os.Remove(dir)
		_ = os.Remove(top)
	})
	if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
	f, err := procwatch.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	if f.ContainerID == "" {
		t.Fatalf("no container id in cgroup %q", f.Cgroup)
	}
	return f.ContainerID
}

// netns is a network namespace joined to this one by a veth pair: the
// host's end has hostAddr, the namespace's nsAddr (TEST-NET addresses on
// a link of the test's own).
type netns struct {
	name             string
	hostAddr, nsAddr string
}

func newNetns(t *testing.T) *netns {
	t.Helper()
	testutil.RequireRoot(t)
	ip := testutil.RequireTool(t, "ip")
	id := os.Getpid() % 10000
	n := &netns{name: fmt.Sprintf("sw-harden-%d", id), hostAddr: "198.18.0.1", nsAddr: "198.18.0.2"}
	host, peer := fmt.Sprintf("swh%da", id), fmt.Sprintf("swh%db", id)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command(ip, "netns", "add", n.name).CombinedOutput(); err != nil {
		testutil.Skip(t, "no network namespace here: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command(ip, "link", "del", host).Run()
		_ = exec.Command(ip, "netns", "del", n.name).Run()
	})
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", n.name)
	run("addr", "add", n.hostAddr+"/30", "dev", host)
	run("link", "set", host, "up")
	run("-n", n.name, "addr", "add", n.nsAddr+"/30", "dev", peer)
	run("-n", n.name, "link", "set", peer, "up")
	run("-n", n.name, "link", "set", "lo", "up")
	return n
}

func (n *netns) exec() []string { return []string{"ip", "netns", "exec", n.name} }

// TestForgedFromAnotherNamespace: a process in another network namespace
// (another container, or a host on the network) sends the frozen
// victim's metric from the victim's port; it does not beat. A watched
// process of that namespace, sending the same way, does.
func TestForgedFromAnotherNamespace(t *testing.T) {
	testutil.Nobody(t)
	ns := newNetns(t)
	port := freeUDPPort(t)
	tp := openTap(t, port)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go tp.Run(ctx)
	mark := newSyncTap(t, ctx, &wg, tp)
	tapPort := strconv.Itoa(port)

	victim, vport := udpsend(t, nil, "--family", "4", "--to", "127.0.0.1", "--tap-port", tapPort, "--metric", "victim.heartbeat")
	insider, _ := udpsend(t, ns.exec(), "--family", "4", "--to", ns.hostAddr, "--tap-port", tapPort, "--metric", "insider.heartbeat")
	mv, _ := dogstatsd.NewMetricMatcher("victim.heartbeat", nil)
	mi, _ := dogstatsd.NewMetricMatcher("insider.heartbeat", nil)
	got := runSource(t, ctx, &wg, tp.Source(victim.Pid, mv))
	in := runSource(t, ctx, &wg, tp.Source(insider.Pid, mi))
	if err := testutil.Eventually(20*time.Second, func() bool { return got.n.Load() >= 3 && in.n.Load() >= 3 }); err != nil {
		t.Fatalf("beats: the victim %d, the watched process in %s %d; %+v", got.n.Load(), ns.name, in.n.Load(), tp.Stats())
	}
	freeze(t, insider, mark, in)
	frozen := freeze(t, victim, mark, got)

	before := tp.Stats().Packets
	forger, _ := udpsend(t, ns.exec(), "--user", "nobody", "--family", "4", "--bind", "0.0.0.0", "--port", strconv.Itoa(vport),
		"--to", ns.hostAddr, "--tap-port", tapPort, "--metric", "victim.heartbeat", "--count", "40", "--interval", "0.01")
	forger.WaitLine(t, "done", 30*time.Second)
	mark.wait(t)
	if seen := tp.Stats().Packets - before; seen < 40 {
		t.Fatalf("the tap saw %d of the 40 forged datagrams", seen)
	}
	if n := got.n.Load(); n != frozen {
		t.Errorf("%d datagrams from %s beat the frozen victim (port %d)", n-frozen, ns.name, vport)
	}
}
