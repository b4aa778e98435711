package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stallwatch/stallwatch/internal/safedir"
)

// StatsdConfig configures a DogStatsD proxy heartbeat.
type StatsdConfig struct {
	// Listen is udp://HOST:PORT or unix:///path (a unixgram socket). A
	// UDP address without a host listens on 127.0.0.1, never on every
	// interface unless asked (udp://0.0.0.0:8125).
	Listen string
	// Forward is where every datagram goes on, byte for byte (the
	// target's real agent), in the same forms; "" forwards nowhere.
	Forward string
	// Metric is a glob over metric names ('*' any run, '?' one byte);
	// "" matches every metric.
	Metric string
	// Tags lists k:v tags a heartbeat metric must carry, all of them.
	Tags []string
	// Logger receives the first malformed datagram's reason, forwarding
	// trouble and the counts when the proxy stops; nil: slog.Default().
	Logger *slog.Logger
}

// StatsdStats counts what a proxy saw.
type StatsdStats struct {
	Datagrams uint64 // received
	Beats     uint64 // datagrams holding a heartbeat metric
	Malformed uint64 // datagrams with a line that is not DogStatsD (still forwarded)
	Forwarded uint64 // sent on to Forward
	Dropped   uint64 // not forwarded: queue full or the agent refused them
}

// StatsdProxy is a DogStatsD heartbeat: it receives the target's metrics
// in place of its agent, forwards every datagram to the agent unchanged,
// and beats whenever a datagram carries a matching metric. Malformed
// datagrams are forwarded and counted, never fatal.
type StatsdProxy struct {
	cfg       StatsdConfig
	log       *slog.Logger
	conn      net.PacketConn
	addr      string // canonical listen address
	unix      string // socket path to remove on Close
	match     matcher
	fwd       *forwarder
	stats     statsdCounters
	tap       func(dg []byte) // tests see each datagram as received
	closeOnce sync.Once
}

type statsdCounters struct {
	datagrams, beats, malformed atomic.Uint64
}

// maxDatagram is the largest datagram UDP carries; unixgram ones the
// DogStatsD clients send are smaller (8 KiB by default).
const maxDatagram = 65535

// ListenStatsd binds the proxy's socket now, so that a busy port or a bad
// path is reported before the target starts.
func ListenStatsd(cfg StatsdConfig) (*StatsdProxy, error) {
	for _, t := range cfg.Tags {
		if err := checkTag(t); err != nil {
			return nil, err
		}
	}
	lnet, laddr, err := parseStatsdAddr(cfg.Listen, true)
	if err != nil {
		return nil, err
	}
	p := &StatsdProxy{cfg: cfg, log: cfg.Logger, match: matcher{glob: cfg.Metric, tags: cfg.Tags}}
	if p.log == nil {
		p.log = slog.Default()
	}
	if cfg.Forward != "" {
		fnet, faddr, err := parseStatsdAddr(cfg.Forward, false)
		if err != nil {
			return nil, err
		}
		if err := checkNoLoop(lnet, laddr, fnet, faddr); err != nil {
			return nil, err
		}
		p.fwd = newForwarder(fnet, faddr, p.log)
	}
	if p.conn, err = listenPacket(lnet, laddr); err != nil {
		return nil, fmt.Errorf("dogstatsd heartbeat: listen on %s: %w", cfg.Listen, err)
	}
	if lnet == "unixgram" {
		p.unix, p.addr = laddr, "unix://"+laddr
	} else {
		p.addr = "udp://" + p.conn.LocalAddr().String()
	}
	if uc, ok := p.conn.(interface{ SetReadBuffer(int) error }); ok {
		_ = uc.SetReadBuffer(4 << 20) // absorb bursts; the kernel caps it at rmem_max
	}
	return p, nil
}

// parseStatsdAddr reads a DogStatsD address: udp://HOST:PORT, HOST:PORT,
// unix:///path, unixgram:///path or /path. For a listening address an
// empty host means 127.0.0.1.
func parseStatsdAddr(s string, listen bool) (network, addr string, err error) {
	rest, isUnix := strings.CutPrefix(s, "unix://")
	if !isUnix {
		rest, isUnix = strings.CutPrefix(s, "unixgram://")
	}
	if isUnix || strings.HasPrefix(s, "/") {
		if !strings.HasPrefix(rest, "/") {
			return "", "", fmt.Errorf("dogstatsd address %q: want unix:///absolute/path", s)
		}
		return "unixgram", rest, nil
	}
	rest = strings.TrimPrefix(s, "udp://")
	host, port, err := net.SplitHostPort(rest)
	if err != nil || port == "" {
		return "", "", fmt.Errorf("dogstatsd address %q: want udp://HOST:PORT or unix:///path", s)
	}
	if host == "" {
		if !listen {
			return "", "", fmt.Errorf("dogstatsd address %q: no host to forward to", s)
		}
		host = "127.0.0.1"
	}
	return "udp", net.JoinHostPort(host, port), nil
}

// checkNoLoop refuses to forward to the proxy's own address: every
// datagram would come back forever.
func checkNoLoop(lnet, laddr, fnet, faddr string) error {
	loop := fmt.Errorf("dogstatsd heartbeat: --forward %s is the address the proxy listens on; it would receive its own datagrams forever", faddr)
	if lnet != fnet {
		return nil
	}
	if lnet == "unixgram" {
		if laddr == faddr {
			return loop
		}
		return nil
	}
	lh, lp, _ := net.SplitHostPort(laddr)
	fh, fp, _ := net.SplitHostPort(faddr)
	if lp != fp || lp == "0" {
		return nil
	}
	lip := net.ParseIP(lh)
	for _, ip := range lookupIPs(fh) {
		if ip.Equal(lip) || (lip != nil && lip.IsUnspecified()) || (ip.IsLoopback() && lip != nil && lip.IsLoopback()) {
			return loop
		}
	}
	return nil
}

func lookupIPs(host string) []net.IP {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}
	}
	ips, _ := net.LookupIP(host)
	return ips
}

// listenPacket binds a UDP or unixgram socket. A unix socket file left by
// a proxy that died is replaced; one that someone still listens on is not.
func listenPacket(network, addr string) (net.PacketConn, error) {
	if network == "udp" {
		return net.ListenPacket("udp", addr)
	}
	conn, err := net.ListenPacket("unixgram", addr)
	if err != nil && errors.Is(err, syscall.EADDRINUSE) && staleSocket(addr) {
		if rmErr := os.Remove(addr); rmErr == nil {
			conn, err = net.ListenPacket("unixgram", addr)
		}
	}
	if err != nil {
		return nil, err
	}
	// The target may run as another user: let it write to the socket.
	// Not through the path: in a directory others can write, it could be
	// a link to any file by now (internal/safedir).
	_ = safedir.ChmodOwned(addr, 0o622)
	return conn, nil
}

// staleSocket reports whether path is a socket nobody receives on.
func staleSocket(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return false
	}
	c, err := net.Dial("unixgram", path)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// String names the source: "statsd udp://127.0.0.1:8125 metric app.*".
func (p *StatsdProxy) String() string {
	s := "statsd " + p.addr
	if p.cfg.Metric != "" {
		s += " metric " + p.cfg.Metric
	}
	for _, t := range p.cfg.Tags {
		s += " tag " + t
	}
	return s
}

// Addr is the address the proxy receives on, in DD_DOGSTATSD_URL form
// (with the port the kernel chose for udp://HOST:0).
func (p *StatsdProxy) Addr() string { return p.addr }

// Stats returns the counts so far.
func (p *StatsdProxy) Stats() StatsdStats {
	st := StatsdStats{
		Datagrams: p.stats.datagrams.Load(),
		Beats:     p.stats.beats.Load(),
		Malformed: p.stats.malformed.Load(),
	}
	if p.fwd != nil {
		st.Forwarded, st.Dropped = p.fwd.sent.Load(), p.fwd.dropped.Load()
	}
	return st
}

// Close releases the socket (and removes a unix socket's file). Run
// returns once the socket is closed.
func (p *StatsdProxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		err = p.conn.Close()
		if p.unix != "" {
			os.Remove(p.unix)
		}
	})
	return err
}

// Run implements Source: it receives until ctx is done (then closes the
// proxy) or the socket fails.
func (p *StatsdProxy) Run(ctx context.Context, beat func()) error {
	stop := context.AfterFunc(ctx, func() { p.Close() })
	defer stop()
	if p.fwd != nil {
		fctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.fwd.run(fctx); close(done) }()
		defer func() { cancel(); <-done }()
	}
	defer p.logStats()
	buf := make([]byte, maxDatagram)
	for {
		n, _, err := p.conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if isTemporary(err) {
				continue
			}
			return fmt.Errorf("dogstatsd heartbeat %s: %w", p.addr, err)
		}
		p.handle(buf[:n], beat)
	}
}

func isTemporary(err error) bool {
	return errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ECONNREFUSED)
}

func (p *StatsdProxy) handle(dg []byte, beat func()) {
	p.stats.datagrams.Add(1)
	if p.tap != nil {
		p.tap(dg)
	}
	if p.fwd != nil {
		p.fwd.send(dg)
	}
	isBeat, malformed := p.match.scan(dg)
	if malformed != "" {
		if p.stats.malformed.Add(1) == 1 {
			p.log.Warn("malformed DogStatsD datagram (forwarded anyway; further ones are only counted)",
				"source", p.String(), "why", malformed, "datagram", quoteBounded(dg, 120))
		}
	}
	if isBeat {
		p.stats.beats.Add(1)
		beat()
	}
}

func quoteBounded(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q…", b[:n])
	}
	return fmt.Sprintf("%q", b)
}

func (p *StatsdProxy) logStats() {
	st := p.Stats()
	p.log.Info("dogstatsd proxy stopped", "source", p.String(), "datagrams", st.Datagrams, "beats", st.Beats,
		"malformed", st.Malformed, "forwarded", st.Forwarded, "dropped", st.Dropped)
}

// forwarder sends datagrams to the agent from a goroutine of its own, so
// that a slow or absent agent never delays reading the target's metrics:
// when its queue is full, datagrams are dropped and counted.
type forwarder struct {
	network, addr string
	log           *slog.Logger
	queue         chan []byte
	queued        atomic.Int64 // bytes waiting in queue
	sent, dropped atomic.Uint64
	warned        bool
}

const (
	forwardQueue   = 4096
	forwardBytes   = 8 << 20 // what a flood of big datagrams may hold
	forwardTimeout = 100 * time.Millisecond
	redialEvery    = time.Second
)

func newForwarder(network, addr string, log *slog.Logger) *forwarder {
	return &forwarder{network: network, addr: addr, log: log, queue: make(chan []byte, forwardQueue)}
}

func (f *forwarder) send(dg []byte) {
	if f.queued.Add(int64(len(dg))) > forwardBytes {
		f.queued.Add(-int64(len(dg)))
		f.dropped.Add(1)
		return
	}
	select {
	case f.queue <- append([]byte(nil), dg...):
	default:
		f.queued.Add(-int64(len(dg)))
		f.dropped.Add(1)
	}
}

// next takes a datagram off the queue.
func (f *forwarder) next(dg []byte) []byte {
	f.queued.Add(-int64(len(dg)))
	return dg
}

func (f *forwarder) run(ctx context.Context) {
	var conn net.Conn
	var lastDial time.Time
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		var dg []byte
		select {
		case <-ctx.Done():
			f.flush(conn)
			return
		case dg = <-f.queue:
			dg = f.next(dg)
		}
		if conn == nil && time.Since(lastDial) >= redialEvery {
			lastDial = time.Now()
			conn = f.dial()
		}
		if conn == nil || !f.write(conn, dg) {
			f.dropped.Add(1)
			if conn != nil && f.network == "unixgram" {
				conn.Close() // the agent may have restarted: dial again
				conn = nil
			}
		}
	}
}

// flush sends what is queued when the proxy stops, without waiting on the
// agent.
func (f *forwarder) flush(conn net.Conn) {
	for {
		select {
		case dg := <-f.queue:
			if conn == nil || !f.write(conn, f.next(dg)) {
				f.dropped.Add(1)
			}
		default:
			return
		}
	}
}

func (f *forwarder) dial() net.Conn {
	conn, err := net.DialTimeout(f.network, f.addr, forwardTimeout)
	if err != nil {
		f.warnOnce("cannot reach the agent to forward to", err)
		return nil
	}
	return conn
}

func (f *forwarder) write(conn net.Conn, dg []byte) bool {
	_ = conn.SetWriteDeadline(time.Now().Add(forwardTimeout))
	if _, err := conn.Write(dg); err != nil {
		f.warnOnce("forwarding a datagram failed", err)
		return false
	}
	f.sent.Add(1)
	return true
}

func (f *forwarder) warnOnce(msg string, err error) {
	if !f.warned {
		f.warned = true
		f.log.Warn(msg+" (further failures are only counted)", "forward", f.network+"://"+f.addr, "err", err)
	}
}
