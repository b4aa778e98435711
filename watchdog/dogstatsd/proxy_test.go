package dogstatsd

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// agent is a real DogStatsD receiver standing in for the Datadog agent: it
// keeps every datagram it gets.
type agent struct {
	conn net.PacketConn
	addr string // in --forward form
	mu   sync.Mutex
	got  [][]byte
	done chan struct{}
}

func startAgent(t *testing.T, network string) *agent {
	t.Helper()
	a := &agent{done: make(chan struct{})}
	var err error
	switch network {
	case "udp":
		a.conn, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err == nil {
			a.addr = "udp://" + a.conn.LocalAddr().String()
		}
	case "unixgram":
		path := filepath.Join(t.TempDir(), "agent.sock")
		a.conn, err = net.ListenPacket("unixgram", path)
		a.addr = "unix://" + path
	}
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(a.done)
		buf := make([]byte, maxDatagram)
		for {
			n, _, err := a.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			a.mu.Lock()
			a.got = append(a.got, append([]byte(nil), buf[:n]...))
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() { a.conn.Close(); <-a.done })
	return a
}

func (a *agent) datagrams() [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]byte(nil), a.got...)
}

// waitFor waits until the agent holds n datagrams.
func (a *agent) waitFor(t *testing.T, n int) [][]byte {
	t.Helper()
	var got [][]byte
	if err := testutil.Eventually(5*time.Second, func() bool { got = a.datagrams(); return len(got) >= n }); err != nil {
		t.Fatalf("agent got %d datagrams, want %d", len(got), n)
	}
	return got
}

func sameDatagrams(t *testing.T, got, want [][]byte) {
	t.Helper()
	sorted := func(in [][]byte) []string {
		out := make([]string, len(in))
		for i, b := range in {
			out[i] = string(b)
		}
		sort.Strings(out)
		return out
	}
	g, w := sorted(got), sorted(want)
	if len(g) != len(w) {
		t.Fatalf("agent got %d datagrams, the target sent %d", len(g), len(w))
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("datagram altered in forwarding:\n got %q\nwant %q", g[i], w[i])
		}
	}
}

func TestStatsdProxy(t *testing.T) {
	for _, network := range []string{"udp", "unixgram"} {
		t.Run(network, func(t *testing.T) {
			ag := startAgent(t, network)
			listen := "udp://127.0.0.1:0"
			if network == "unixgram" {
				listen = "unix://" + filepath.Join(t.TempDir(), "proxy.sock")
			}
			rec := &logRecorder{}
			p, err := Listen(Config{Listen: listen, Forward: ag.addr, Metric: "app.heart*", Tags: []string{"env:prod"}, Logger: slog.New(rec)})
			if err != nil {
				t.Fatal(err)
			}
			bc := runSource(t, p)
			lnet, laddr, _ := parseStatsdAddr(p.Addr(), false)
			app, err := net.Dial(lnet, laddr)
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()

			var sent [][]byte
			send := func(dg string) {
				t.Helper()
				if _, err := app.Write([]byte(dg)); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, []byte(dg))
			}
			send("app.requests:1|c|#env:prod")
			send("app.heartbeat:1|g|#env:staging")
			bc.expectQuiet(t, "metrics that are not the heartbeat", 200*time.Millisecond)
			send("app.requests:1|c\napp.heartbeat:1|g|#svc:api,env:prod\n")
			bc.expectBeat(t, "a matching line in a multi-line datagram", 2*time.Second)
			send("garbage\x00\xff|||")
			send(string(bytes.Repeat([]byte("x"), 8000)))
			bc.expectQuiet(t, "malformed datagrams", 200*time.Millisecond)
			send("app.heartbeats:1|c|#env:prod")
			bc.expectBeat(t, "a glob match", 2*time.Second)

			sameDatagrams(t, ag.waitFor(t, len(sent)), sent)
			st := p.Stats()
			want := Stats{Datagrams: 6, Beats: 2, Malformed: 2, Forwarded: 6}
			if st != want {
				t.Errorf("stats %+v, want %+v", st, want)
			}
			if r, ok := rec.find("malformed"); !ok || attr(r, "datagram").String() == "" {
				t.Error("first malformed datagram not logged with its content")
			}
		})
	}
}

func TestStatsdProxyAgentAbsent(t *testing.T) {
	// The agent is down: datagrams are counted as dropped, beats still
	// come, and nothing blocks.
	dir := t.TempDir()
	p, err := Listen(Config{Listen: "unix://" + filepath.Join(dir, "p.sock"), Forward: "unix://" + filepath.Join(dir, "absent.sock"), Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	bc := runSource(t, p)
	app, err := net.Dial("unixgram", filepath.Join(dir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	for i := range 50 {
		fmt.Fprintf(app, "hb:%d|c", i)
	}
	bc.expectBeat(t, "beats with the agent absent", 2*time.Second)
	testutil.Eventually(5*time.Second, func() bool { return p.Stats().Dropped >= 50 })
	if st := p.Stats(); st.Dropped != 50 || st.Forwarded != 0 || st.Datagrams != 50 {
		t.Errorf("stats with no agent: %+v", st)
	}
}

func TestStatsdProxyStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.sock")
	first, err := Listen(Config{Listen: "unix://" + path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(Config{Listen: "unix://" + path}); err == nil {
		t.Fatal("took over a socket that a live proxy receives on")
	}
	// A proxy that died leaves its socket file: simulate by closing the
	// listener without removing the file.
	first.conn.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the dead proxy's socket file is gone, nothing to test: %v", err)
	}
	second, err := Listen(Config{Listen: "unix://" + path})
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	second.Close()
}

func TestStatsdProxyRefusesLoop(t *testing.T) {
	_, err := Listen(Config{Listen: "udp://127.0.0.1:18125", Forward: "udp://localhost:18125"})
	if err == nil {
		t.Fatal("forwarding to its own address accepted")
	}
	if _, err := Listen(Config{Listen: "udp://127.0.0.1:0", Tags: []string{"a,b"}}); err == nil {
		t.Fatal("bad --metric-tag accepted")
	}
}

// TestStatsdProxyStuckAgent: an agent that never reads (a unixgram socket
// whose queue fills) does not hold up the target's beats; every datagram
// is either forwarded or counted as dropped, and the forwarder holds no
// more than its batches.
func TestStatsdProxyStuckAgent(t *testing.T) {
	dir := t.TempDir()
	stuck, err := net.ListenPacket("unixgram", filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	p, err := Listen(Config{Listen: "unix://" + filepath.Join(dir, "p.sock"), Forward: "unix://" + filepath.Join(dir, "agent.sock"),
		Metric: "hb", Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	bc := runSource(t, p)
	app, err := net.Dial("unixgram", filepath.Join(dir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	const n = 5000
	for i := range n {
		fmt.Fprintf(app, "app.requests:%d|c", i)
	}
	fmt.Fprint(app, "hb:1|c")
	bc.expectBeat(t, "a beat behind 5,000 datagrams the agent does not take", 5*time.Second)
	if err := testutil.Eventually(10*time.Second, func() bool {
		st := p.Stats()
		return st.Datagrams == n+1 && st.Forwarded+st.Dropped == n+1
	}); err != nil {
		t.Fatalf("stats %+v: want %d datagrams, each forwarded or dropped", p.Stats(), n+1)
	}
	if st := p.Stats(); st.Dropped == 0 || st.KernelDropped != 0 {
		t.Errorf("stats %+v: a stuck agent must cost dropped datagrams, counted, and none at our socket", st)
	}
}

// TestStatsdProxyCountsKernelDrops: datagrams the kernel drops at the
// proxy's socket (its receive buffer full while the proxy does not read)
// are counted, exactly as /proc/net/udp counts them, logged while the
// proxy runs, and with the datagrams received add up to what was sent.
func TestStatsdProxyCountsKernelDrops(t *testing.T) {
	rec := &logRecorder{}
	p, err := Listen(Config{Listen: "udp://127.0.0.1:0", Logger: slog.New(rec), LogEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && p.RcvBuf() < rcvbufWanted {
		t.Errorf("as root the receive buffer is %d bytes, asked %d", p.RcvBuf(), rcvbufWanted)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.Addr(), "udp://"))
	app, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	// More than the buffer holds, before the proxy reads anything.
	dg := bytes.Repeat([]byte("app.requests:1|c|#env:test\n"), 53)
	sent := 2*p.RcvBuf()/len(dg) + 1000
	for range sent {
		if _, err := app.Write(dg); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := strconv.Atoi(port)
	kernel := procUDPDrops(t, n)
	if kernel == 0 {
		t.Fatalf("%d datagrams of %d bytes into a %d-byte buffer, and the kernel dropped none", sent, len(dg), p.RcvBuf())
	}
	runSource(t, p)
	if err := testutil.Eventually(10*time.Second, func() bool {
		st := p.Stats()
		return st.Datagrams+st.KernelDropped == uint64(sent)
	}); err != nil {
		t.Fatalf("stats %+v: received and dropped by the kernel do not add up to the %d sent", p.Stats(), sent)
	}
	if st := p.Stats(); st.KernelDropped != kernel {
		t.Errorf("counted %d kernel drops, /proc/net/udp says %d", st.KernelDropped, kernel)
	}
	if err := testutil.Eventually(5*time.Second, func() bool { _, ok := rec.find("dogstatsd datagrams dropped"); return ok }); err != nil {
		t.Fatal("the drops were not logged while the proxy ran")
	}
	r, _ := rec.find("dogstatsd datagrams dropped")
	if got := attr(r, "kernel_dropped").Uint64(); got != kernel {
		t.Errorf("log line says %d dropped by the kernel, want %d", got, kernel)
	}
}

// procUDPDrops reads the drops column of /proc/net/udp for the socket on
// 127.0.0.1:port.
func procUDPDrops(t testing.TB, port int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 13 && f[1] == want {
			n, _ := strconv.ParseUint(f[len(f)-1], 10, 64)
			return n
		}
	}
	t.Fatalf("no socket on 127.0.0.1:%d in /proc/net/udp", port)
	return 0
}

// TestStatsdProxyTruncated: a unixgram datagram longer than the proxy's
// 64 KiB slot is scanned for a beat but not forwarded in part: counted as
// dropped.
func TestStatsdProxyTruncated(t *testing.T) {
	ag := startAgent(t, "unixgram")
	path := filepath.Join(t.TempDir(), "p.sock")
	p, err := Listen(Config{Listen: "unix://" + path, Forward: ag.addr, Metric: "hb", Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	bc := runSource(t, p)
	app, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if uc, ok := app.(*net.UnixConn); ok {
		uc.SetWriteBuffer(1 << 20)
	}
	huge := append([]byte("hb:1|c\n"), bytes.Repeat([]byte("x"), 100<<10)...)
	if _, err := app.Write(huge); err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(app, "app.requests:1|c")
	bc.expectBeat(t, "a beat at the start of a datagram too long to forward", 2*time.Second)
	got := ag.waitFor(t, 1)
	if err := testutil.Eventually(5*time.Second, func() bool { return p.Stats().Forwarded+p.Stats().Dropped == 2 }); err != nil {
		t.Fatalf("stats %+v", p.Stats())
	}
	if st := p.Stats(); st.Dropped != 1 || st.Forwarded != 1 || len(got) != 1 || string(got[0]) != "app.requests:1|c" {
		t.Errorf("stats %+v, agent got %d datagrams: want the long one dropped and the other forwarded", st, len(got))
	}
}

// TestStatsdHandleAllocates: scanning and counting a batch allocates
// nothing, whatever its size (the first malformed datagram's log line
// aside).
func TestStatsdHandleAllocates(t *testing.T) {
	p := &Proxy{log: slog.New(&logRecorder{}), match: matcher{glob: "app.heart*", tags: []string{"env:prod"}}}
	b := newBatch()
	lines := []string{"app.requests:1|c|#env:prod", "app.heartbeat:1|g|#svc:api,env:prod\napp.latency:3|d", "_e{5,4}:title|text"}
	for i := range batchLen {
		n := copy(b.data[i*maxDatagram:], lines[i%len(lines)])
		b.hdrs[i].Len = uint32(n)
	}
	b.n = batchLen
	if allocs := testing.AllocsPerRun(100, func() { p.handle(b) }); allocs != 0 {
		t.Errorf("handling a batch of %d datagrams allocated %v times", batchLen, allocs)
	}
	if !p.handle(b) {
		t.Error("a batch with a heartbeat is no beat")
	}
}
