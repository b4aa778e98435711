package dogstatsd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
)

// The DogStatsD proxy on loopback, beside what one real datadog-go/v5
// client sends. Figures:
//
//	client-dgrams/s   datagrams a datadog-go client (default options,
//	                  distributions as fast as one goroutine submits them)
//	                  gets through the proxy
//	client-metrics/s  the metrics in them
//	sustained-dgrams/s the highest paced rate (ladder of 1 s steps) at which
//	                  the proxy forwarded every datagram: nothing dropped by
//	                  the kernel at its socket nor by itself
//	sustained/client  the two rates' ratio (goal: ≥ 1)
//	burst-kernel-drops, burst-counted-kernel, burst-proxy-drops: 200,000
//	                  datagrams sent at once (the audit's burst): drops in
//	                  /proc/net/udp, drops the proxy counted from the
//	                  kernel, drops the proxy counted of its own
//
// The datagrams are the client's: lines of a distribution with tags, up
// to 1,432 bytes (its UDP payload size).
func BenchmarkStatsdProxy(b *testing.B) {
	for b.Loop() {
		client := benchClientRate(b)
		sustained := benchSustainedRate(b)
		burst := benchBurst(b, 200_000)
		b.ReportMetric(client.dgrams, "client-dgrams/s")
		b.ReportMetric(client.metrics, "client-metrics/s")
		b.ReportMetric(sustained, "sustained-dgrams/s")
		b.ReportMetric(sustained/client.dgrams, "sustained/client")
		b.ReportMetric(float64(burst.kernel), "burst-kernel-drops")
		b.ReportMetric(float64(burst.counted), "burst-counted-kernel")
		b.ReportMetric(float64(burst.proxy), "burst-proxy-drops")
		b.ReportMetric(0, "ns/op")
		b.Logf("client %.0f datagrams/s (%.0f metrics/s); proxy sustained %.0f datagrams/s; burst of 200,000: %d dropped by the kernel (%d counted), %d by the proxy, %d forwarded",
			client.dgrams, client.metrics, sustained, burst.kernel, burst.counted, burst.proxy, burst.forwarded)
	}
}

// benchAgent is the agent's stand-in: it receives and counts.
type benchAgent struct {
	conn *net.UDPConn
	got  atomic.Uint64
	done chan struct{}
}

func startBenchAgent(b *testing.B) *benchAgent {
	b.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	forceRcvbuf(conn, 32<<20)
	a := &benchAgent{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		buf := make([]byte, maxDatagram)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
			a.got.Add(1)
		}
	}()
	b.Cleanup(func() { conn.Close(); <-a.done })
	return a
}

// forceRcvbuf sets a socket's receive buffer past rmem_max (as root).
func forceRcvbuf(conn *net.UDPConn, n int) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, n)
	})
}

// benchProxy starts a proxy that forwards to a counting agent.
func benchProxy(b *testing.B) (*Proxy, *benchAgent, func()) {
	b.Helper()
	ag := startBenchAgent(b)
	p, err := Listen(Config{Listen: "udp://127.0.0.1:0", Forward: "udp://" + ag.conn.LocalAddr().String(),
		Metric: "app.heartbeat", Logger: slog.New(slog.NewTextHandler(nopWriter{}, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, func() {}); close(done) }()
	return p, ag, func() { cancel(); <-done }
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

type clientRate struct{ dgrams, metrics float64 }

// benchClientRate measures what one datadog-go client sends through the
// proxy in a second when a goroutine submits distributions without pause.
func benchClientRate(b *testing.B) clientRate {
	p, _, stop := benchProxy(b)
	defer stop()
	c, err := statsd.New(strings.TrimPrefix(p.Addr(), "udp://"), statsd.WithoutTelemetry())
	if err != nil {
		b.Fatal(err)
	}
	tags := []string{"env:bench", "service:api", "route:/v1/items"}
	start := time.Now()
	var n int
	for time.Since(start) < time.Second {
		for range 1000 {
			c.Distribution("app.request.latency", float64(n%1000), tags, 1)
			n++
		}
	}
	c.Close()
	took := time.Since(start)
	settle(p)
	dgrams := float64(p.Stats().Datagrams)
	return clientRate{dgrams: dgrams / took.Seconds(), metrics: float64(n) / took.Seconds()}
}

// settle waits until the proxy's received count stops moving.
func settle(p *Proxy) {
	last := p.Stats().Datagrams
	for {
		time.Sleep(50 * time.Millisecond)
		now := p.Stats().Datagrams
		if now == last {
			return
		}
		last = now
	}
}

// clientDatagram is one datagram as the client writes them: distribution
// lines with tags, up to its UDP payload size.
func clientDatagram() []byte {
	var buf bytes.Buffer
	line := "app.request.latency:417|d|#env:bench,service:api,route:/v1/items\n"
	for buf.Len()+len(line) <= statsd.OptimalUDPPayloadSize {
		buf.WriteString(line)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// proxyDrops is what was dropped at and in the proxy so far.
type proxyDrops struct {
	kernel, counted, proxy, forwarded uint64
}

func dropsOf(b *testing.B, p *Proxy) proxyDrops {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.Addr(), "udp://"))
	n, _ := strconv.Atoi(port)
	st := p.Stats()
	return proxyDrops{kernel: udpDrops(b, n), counted: st.KernelDropped, proxy: st.Dropped, forwarded: st.Forwarded}
}

// benchSustainedRate sends the client's datagrams at paced rates, a second
// each, doubling then bisecting, and returns the highest rate the proxy
// forwarded whole.
func benchSustainedRate(b *testing.B) float64 {
	dg := clientDatagram()
	ok := func(rate int) bool {
		p, ag, stop := benchProxy(b)
		defer stop()
		conn, err := net.Dial("udp", strings.TrimPrefix(p.Addr(), "udp://"))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		sent := sendPaced(conn, dg, rate, time.Second)
		settle(p)
		d := dropsOf(b, p)
		return d.kernel == 0 && d.proxy == 0 && d.forwarded == uint64(sent) && sent >= rate*9/10 && ag.got.Load() > 0
	}
	lo, hi := 0, 10_000
	for ok(hi) && hi < 10_000_000 {
		lo, hi = hi, 2*hi
	}
	for hi-lo > lo/20 {
		if mid := (lo + hi) / 2; ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return float64(lo)
}

// sendPaced writes dg rate times a second for d, in slices of a
// millisecond, and returns how many it wrote.
func sendPaced(conn net.Conn, dg []byte, rate int, d time.Duration) int {
	start := time.Now()
	sent := 0
	for el := time.Duration(0); el < d; el = time.Since(start) {
		due := int(float64(rate) * el.Seconds())
		for ; sent < due; sent++ {
			if _, err := conn.Write(dg); err != nil {
				return sent
			}
		}
		time.Sleep(time.Millisecond)
	}
	return sent
}

// benchBurst sends n of the client's datagrams as fast as one writer can.
func benchBurst(b *testing.B, n int) proxyDrops {
	p, _, stop := benchProxy(b)
	defer stop()
	conn, err := net.Dial("udp", strings.TrimPrefix(p.Addr(), "udp://"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	dg := clientDatagram()
	for range n {
		conn.Write(dg)
	}
	settle(p)
	return dropsOf(b, p)
}

// udpDrops reads the drops column of /proc/net/udp for the socket bound to
// 127.0.0.1:port.
func udpDrops(b *testing.B, port int) uint64 {
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	want := fmt.Sprintf("0100007F:%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 13 && fields[1] == want {
			n, _ := strconv.ParseUint(fields[len(fields)-1], 10, 64)
			return n
		}
	}
	b.Fatalf("no socket on 127.0.0.1:%d in /proc/net/udp", port)
	return 0
}
