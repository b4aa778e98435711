package tap

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd"
)

// TestSenderFilterLoads: this kernel takes the filter that names who
// sends (a socket filter calling bpf_get_current_pid_tgid, Linux 6.10 and
// later); the tap falls back to sockets elsewhere.
func TestSenderFilterLoads(t *testing.T) {
	testutil.RequireRoot(t)
	s, err := openSenders(8125, 1)
	if err != nil {
		testutil.Skip(t, "the kernel refuses the sender filter: %v", err)
	}
	s.close()
}

// TestSocketPerDatagram: bash sends each beat with `echo > /dev/udp/…`,
// a socket opened and closed for one datagram, gone before the tap reads
// it; each is still its sender's.
func TestSocketPerDatagram(t *testing.T) {
	bash := testutil.RequireTool(t, "bash")
	port := freeUDPPort(t)
	tp := openTap(t, port)
	if tp.senders == nil {
		testutil.Skip(t, "no sender filter on this kernel: a socket per datagram cannot be told")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go tp.Run(ctx)
	sh := testutil.StartCmd(t, exec.Command(bash, "-c", `echo ready; while :; do echo -n "bash.heartbeat:1|c" > /dev/udp/127.0.0.1/`+strconv.Itoa(port)+` 2>/dev/null; sleep 0.05; done`))
	sh.WaitLine(t, "ready", 10*time.Second)
	m, _ := dogstatsd.NewMetricMatcher("bash.heartbeat", nil)
	got := runSource(t, ctx, &wg, tp.Source(sh.Pid, m))
	if err := testutil.Eventually(20*time.Second, func() bool { return got.n.Load() >= 10 }); err != nil {
		t.Fatalf("%d beats from bash's /dev/udp datagrams; tap %+v", got.n.Load(), tp.Stats())
	}
}

// TestSharedSocketWorkers: a prefork server's two workers send through
// the one socket their parent made; each beat is the worker's that sent
// it: one frozen stops beating while the other goes on, and the parent,
// in pause(), never beats.
func TestSharedSocketWorkers(t *testing.T) {
	port := freeUDPPort(t)
	tp := openTap(t, port)
	if tp.senders == nil {
		testutil.Skip(t, "no sender filter on this kernel: the processes sharing a socket cannot be told apart")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go tp.Run(ctx)
	mark := newSyncTap(t, ctx, &wg, tp)
	srv, _ := udpsend(t, nil, "--family", "4", "--to", "127.0.0.1", "--tap-port", strconv.Itoa(port), "--metric", "worker.heartbeat", "--fork", "2")
	var workers []int
	for _, f := range strings.Fields(strings.TrimPrefix(srv.WaitLine(t, "workers ", 20*time.Second), "workers ")) {
		n, _ := strconv.Atoi(f)
		workers = append(workers, n)
	}
	mark.wait(t) // the parent's one datagram, which gave the socket its port, is read
	m, _ := dogstatsd.NewMetricMatcher("worker.heartbeat", nil)
	parent := runSource(t, ctx, &wg, tp.Source(srv.Pid, m))
	a := runSource(t, ctx, &wg, tp.Source(workers[0], m))
	b := runSource(t, ctx, &wg, tp.Source(workers[1], m))
	if err := testutil.Eventually(20*time.Second, func() bool { return a.n.Load() >= 5 && b.n.Load() >= 5 }); err != nil {
		t.Fatalf("beats: workers %d and %d; tap %+v", a.n.Load(), b.n.Load(), tp.Stats())
	}
	if err := syscall.Kill(workers[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(workers[0], syscall.SIGCONT)
	mark.wait(t)
	frozen := a.n.Load()
	more := b.n.Load() + 10
	if err := testutil.Eventually(20*time.Second, func() bool { return b.n.Load() >= more }); err != nil {
		t.Fatalf("the other worker stopped beating: %d", b.n.Load())
	}
	mark.wait(t)
	if n := a.n.Load(); n != frozen {
		t.Errorf("the frozen worker beat %d times on its sibling's datagrams", n-frozen)
	}
	if n := parent.n.Load(); n != 0 {
		t.Errorf("the parent, in pause(), beat %d times", n)
	}
}

// BenchmarkSenderLookup: naming a loopback datagram's sender costs a
// look-up in what was read of the ring buffer, no system call.
func BenchmarkSenderLookup(b *testing.B) {
	testutil.RequireRoot(b)
	s, err := openSenders(8125, 1)
	if err != nil {
		testutil.Skip(b, "the kernel refuses the sender filter: %v", err)
	}
	defer s.close()
	pkt := make([]byte, 20+8+20)
	pkt[0], pkt[9] = 0x45, 17
	for b.Loop() {
		_ = s.lookup(pkt, protoIPv4)
	}
}
