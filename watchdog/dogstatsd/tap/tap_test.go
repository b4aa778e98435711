package tap

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/watchdog"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd"
)

// freeUDPPort is a UDP port nobody listens on: bound, then closed.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	return port
}

// sender is a beater: a real datadog-go client sending its heartbeat
// metric to a port; "stop" on its stdin silences it.
type sender struct {
	*testutil.Target
	control io.Writer
}

func startSender(t *testing.T, beater string, port int, metric string) *sender {
	t.Helper()
	// Only the heartbeat metric: with nobody listening, each datagram may
	// be answered by ICMP port unreachable, which fails the client's next
	// send (ECONNREFUSED); a second metric after each beat would be the
	// one to go through, and the heartbeat the one lost.
	cmd := exec.Command(beater, "-statsd", "127.0.0.1:"+strconv.Itoa(port), "-metric", metric, "-interval", "50ms", "-requests=false")
	control, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 20*time.Second)
	return &sender{tg, control}
}

// beats counts a source's beats.
type beats struct {
	n  atomic.Int64
	at atomic.Int64 // unix ns of the last
}

func runSource(t *testing.T, ctx context.Context, wg *sync.WaitGroup, src watchdog.Source) *beats {
	b := &beats{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = src.Run(ctx, func() { b.n.Add(1); b.at.Store(time.Now().UnixNano()) })
	}()
	return b
}

func openTap(t *testing.T, port int) *Tap {
	t.Helper()
	testutil.RequireRoot(t)
	tp, err := Open("udp://:"+strconv.Itoa(port), nil)
	if err != nil {
		testutil.Skip(t, "no packet socket here: %v", err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}

// TestTwoSenders: two processes send the same metric to a port nobody
// listens on; each beat is given to the process that sent it, and when
// one goes silent only its heartbeat stops. (With nobody listening, the
// kernel answers some datagrams with ICMP port unreachable, and the
// client's next send on its connected socket fails with ECONNREFUSED:
// the client itself loses some heartbeats. What it sends, the tap sees.)
func TestTwoSenders(t *testing.T) {
	beater := testutil.BuildGo(t, "beater")
	port := freeUDPPort(t)
	tp := openTap(t, port)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go tp.Run(ctx)

	a := startSender(t, beater, port, "tapped.heartbeat")
	b := startSender(t, beater, port, "tapped.heartbeat")
	m, err := dogstatsd.NewMetricMatcher("tapped.*", nil)
	if err != nil {
		t.Fatal(err)
	}
	beatsA := runSource(t, ctx, &wg, tp.Source(a.Pid, m))
	beatsB := runSource(t, ctx, &wg, tp.Source(b.Pid, m))
	if err := testutil.Eventually(20*time.Second, func() bool { return beatsA.n.Load() >= 5 && beatsB.n.Load() >= 5 }); err != nil {
		t.Fatalf("beats: a %d, b %d; tap %+v", beatsA.n.Load(), beatsB.n.Load(), tp.Stats())
	}
	t.Logf("both beat (a %d, b %d): %+v", beatsA.n.Load(), beatsB.n.Load(), tp.Stats())
	fmt.Fprintln(a.control, "stop")
	a.WaitLine(t, "stopped", 10*time.Second)
	// The datagram of a's last beat may still be on its way; what comes
	// after, while b beats on, must not count for a.
	settle := beatsB.n.Load() + 3
	if err := testutil.Eventually(10*time.Second, func() bool { return beatsB.n.Load() >= settle }); err != nil {
		t.Fatal("b stopped beating too")
	}
	silentA := beatsA.n.Load()
	more := beatsB.n.Load() + 5
	if err := testutil.Eventually(30*time.Second, func() bool { return beatsB.n.Load() >= more }); err != nil {
		t.Fatalf("b's beats stopped after a was silenced: %d", beatsB.n.Load())
	}
	if got := beatsA.n.Load(); got != silentA {
		t.Errorf("a beat %d times after it stopped sending", got-silentA)
	}
	st := tp.Stats()
	if st.Attributed == 0 || st.Attributed > st.Packets {
		t.Errorf("stats %+v", st)
	}
}

// TestUnwatchedSender: datagrams of a process no source watches beat
// nothing, and a datagram with another metric is not a heartbeat.
func TestUnwatchedSender(t *testing.T) {
	beater := testutil.BuildGo(t, "beater")
	port := freeUDPPort(t)
	tp := openTap(t, port)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go tp.Run(ctx)
	other := startSender(t, beater, port, "app.other")
	watched := startSender(t, beater, port, "app.requests")
	_ = other
	m, _ := dogstatsd.NewMetricMatcher("app.heartbeat", nil)
	got := runSource(t, ctx, &wg, tp.Source(watched.Pid, m))
	if err := testutil.Eventually(20*time.Second, func() bool { return tp.Stats().Attributed >= 10 }); err != nil {
		t.Fatalf("nothing attributed: %+v", tp.Stats())
	}
	if n := got.n.Load(); n != 0 {
		t.Errorf("%d beats from a metric that does not match", n)
	}
}
