package watchdog

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
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
			p, err := ListenStatsd(StatsdConfig{Listen: listen, Forward: ag.addr, Metric: "app.heart*", Tags: []string{"env:prod"}, Logger: slog.New(rec)})
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
			want := StatsdStats{Datagrams: 6, Beats: 2, Malformed: 2, Forwarded: 6}
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
	p, err := ListenStatsd(StatsdConfig{Listen: "unix://" + filepath.Join(dir, "p.sock"), Forward: "unix://" + filepath.Join(dir, "absent.sock"), Logger: slog.New(&logRecorder{})})
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
	first, err := ListenStatsd(StatsdConfig{Listen: "unix://" + path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ListenStatsd(StatsdConfig{Listen: "unix://" + path}); err == nil {
		t.Fatal("took over a socket that a live proxy receives on")
	}
	// A proxy that died leaves its socket file: simulate by closing the
	// listener without removing the file.
	first.conn.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the dead proxy's socket file is gone, nothing to test: %v", err)
	}
	second, err := ListenStatsd(StatsdConfig{Listen: "unix://" + path})
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	second.Close()
}

func TestStatsdProxyRefusesLoop(t *testing.T) {
	_, err := ListenStatsd(StatsdConfig{Listen: "udp://127.0.0.1:18125", Forward: "udp://localhost:18125"})
	if err == nil {
		t.Fatal("forwarding to its own address accepted")
	}
	if _, err := ListenStatsd(StatsdConfig{Listen: "udp://127.0.0.1:0", Tags: []string{"a,b"}}); err == nil {
		t.Fatal("bad --metric-tag accepted")
	}
}

func TestForwarderQueueIsBounded(t *testing.T) {
	// The agent is stuck (nothing drains the queue) and the target sends
	// big datagrams: memory stays bounded, the excess is counted.
	f := newForwarder("udp", "127.0.0.1:9", slog.New(&logRecorder{}))
	big := make([]byte, maxDatagram)
	for range 200 {
		f.send(big)
	}
	if q := f.queued.Load(); q > forwardBytes {
		t.Errorf("%d bytes queued, bound is %d", q, forwardBytes)
	}
	if want := uint64(200 - forwardBytes/maxDatagram); f.dropped.Load() != want {
		t.Errorf("dropped %d, want %d", f.dropped.Load(), want)
	}
	for range len(f.queue) {
		f.next(<-f.queue)
	}
	if q := f.queued.Load(); q != 0 {
		t.Errorf("%d bytes counted in an empty queue", q)
	}
}
