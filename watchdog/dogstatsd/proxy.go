package dogstatsd

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

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/safedir"
)

// Config configures a DogStatsD proxy heartbeat.
type Config struct {
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
	// LogEvery is how often drops are logged while running, each time as
	// the counts since the last line (default 10s); nothing dropped,
	// nothing logged.
	LogEvery time.Duration
}

// Stats counts what a proxy saw.
type Stats struct {
	Datagrams uint64 // received
	Beats     uint64 // datagrams holding a heartbeat metric
	Malformed uint64 // datagrams with a line that is not DogStatsD (still forwarded)
	Forwarded uint64 // sent on to Forward
	// Dropped were received but not forwarded: the agent was slow (the
	// forwarder held every batch for longer than 100 ms), refused them or could not be
	// reached, or the datagram was longer than 64 KiB.
	Dropped uint64
	// KernelDropped never reached the proxy: the kernel dropped them at
	// its socket, whose receive buffer was full (UDP only; a unixgram
	// sender waits instead).
	KernelDropped uint64
}

// Proxy is a DogStatsD heartbeat: it receives the target's metrics
// in place of its agent, forwards every datagram to the agent unchanged,
// and beats whenever a datagram carries a matching metric. Malformed
// datagrams are forwarded and counted, never fatal.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	conn      net.PacketConn
	addr      string // canonical listen address
	unix      string // socket path to remove on Close
	match     matcher
	fwd       *forwarder
	rc        syscall.RawConn
	rcvbuf    rcvbuf
	stats     statsdCounters
	tap       func(dg []byte) // tests see each datagram as received
	closeOnce sync.Once
}

type statsdCounters struct {
	datagrams, beats, malformed, kernelDropped atomic.Uint64
	dropped                                    atomic.Uint64 // by the receiver: no batch free, or truncated
}

// maxDatagram is the largest datagram UDP carries; unixgram ones the
// DogStatsD clients send are smaller (8 KiB by default).
const maxDatagram = 65535

// Listen binds the proxy's socket now, so that a busy port or a bad
// path is reported before the target starts.
func Listen(cfg Config) (*Proxy, error) {
	for _, t := range cfg.Tags {
		if err := checkTag(t); err != nil {
			return nil, err
		}
	}
	lnet, laddr, err := parseStatsdAddr(cfg.Listen, true)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger, match: matcher{glob: cfg.Metric, tags: cfg.Tags}}
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
	if p.rc, err = p.conn.(syscall.Conn).SyscallConn(); err != nil {
		p.conn.Close()
		return nil, err
	}
	buf, err := sizeRcvbuf(p.rc)
	switch {
	case err != nil:
		p.log.Warn("dogstatsd proxy: sizing the receive buffer failed", "source", p.String(), "err", err)
	case lnet == "udp" && buf.short():
		p.log.Warn("dogstatsd proxy: the receive buffer is smaller than asked; bursts may be dropped by the kernel (counted)",
			"source", p.String(), "rcvbuf", buf.String(),
			"fix", rcvbufFix(buf.wanted))
	default:
		p.log.Debug("dogstatsd proxy: receive buffer", "source", p.String(), "rcvbuf", buf.String(), "forced", buf.forced)
	}
	p.rcvbuf = buf
	return p, nil
}

// rcvbufFix is how to let the proxy have a receive buffer of wanted
// bytes: the setting, or what the permissions table says of forcing it.
func rcvbufFix(wanted int) string {
	fixes := perms.Of(perms.ReceiveBuffer).Fixes(perms.ReadSelf(), perms.Setting{})
	return strings.Join(append([]string{fmt.Sprintf("`sudo sysctl net.core.rmem_max=%d`", wanted)}, fixes...), ", or ")
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
func (p *Proxy) String() string {
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
func (p *Proxy) Addr() string { return p.addr }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.readKernelDrops()
	st := Stats{
		Datagrams:     p.stats.datagrams.Load(),
		Beats:         p.stats.beats.Load(),
		Malformed:     p.stats.malformed.Load(),
		Dropped:       p.stats.dropped.Load(),
		KernelDropped: p.stats.kernelDropped.Load(),
	}
	if p.fwd != nil {
		st.Forwarded = p.fwd.sent.Load()
		st.Dropped += p.fwd.dropped.Load()
	}
	return st
}

// RcvBuf is the receive buffer the kernel granted the proxy's socket, in
// bytes as it counts them (twice what was set: its bookkeeping included).
func (p *Proxy) RcvBuf() int { return p.rcvbuf.got }

// noteKernelDrops raises the kernel's drop count to d (counts only grow).
func (p *Proxy) noteKernelDrops(d uint64) {
	for {
		old := p.stats.kernelDropped.Load()
		if d <= old || p.stats.kernelDropped.CompareAndSwap(old, d) {
			return
		}
	}
}

// readKernelDrops asks the socket for its drop count: SO_RXQ_OVFL comes
// only with a datagram, and says nothing of drops after the last one.
func (p *Proxy) readKernelDrops() {
	if d, ok := socketDrops(p.rc); ok {
		p.noteKernelDrops(uint64(d))
	}
}

// Close releases the socket (and removes a unix socket's file). Run
// returns once the socket is closed.
func (p *Proxy) Close() error {
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
// proxy) or the socket fails. Drops are logged every LogEvery while they
// happen, and the counts once more when it stops.
func (p *Proxy) Run(ctx context.Context, beat func()) error {
	stop := context.AfterFunc(ctx, func() { p.Close() })
	defer stop()
	free := make(chan *batch, batches)
	if p.fwd != nil {
		for range batches {
			free <- newBatch()
		}
		fctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.fwd.run(fctx, free); close(done) }()
		defer func() { cancel(); <-done }()
	}
	defer p.logStats()
	logDone := make(chan struct{})
	go p.logDrops(logDone)
	defer close(logDone)
	spare := newBatch() // read into when every batch is with the forwarder, or without one
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	for {
		b := spare
		select {
		case b = <-free:
		default:
			if p.fwd != nil {
				b = p.awaitBatch(free, wait, spare)
			}
		}
		if err := recvBatch(p.rc, b); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if isTemporary(err) {
				continue
			}
			return fmt.Errorf("dogstatsd heartbeat %s: %w", p.addr, err)
		}
		if p.handle(b) {
			beat()
		}
		switch {
		case b == spare && p.fwd != nil:
			p.stats.dropped.Add(uint64(b.n)) // the agent is behind
		case b != spare:
			p.fwd.queue <- b // never blocks: it holds every batch there is
		}
	}
}

// awaitBatch waits for the forwarder to give a batch back, at most
// forwardTimeout: meanwhile the kernel's receive buffer (sized at start)
// holds what arrives, so that a forwarder the scheduler has not run yet
// costs no datagram. An agent slower than that gets spare, whose
// datagrams are read for beats and dropped (counted): it never delays
// reading the target's metrics by more than forwardTimeout.
func (p *Proxy) awaitBatch(free <-chan *batch, wait *time.Timer, spare *batch) *batch {
	wait.Reset(forwardTimeout)
	defer wait.Stop()
	select {
	case b := <-free:
		return b
	case <-wait.C:
		return spare
	}
}

func isTemporary(err error) bool {
	return errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ECONNREFUSED)
}

// handle counts and scans a batch in place, and reports whether any of
// its datagrams was a beat. Truncated datagrams are scanned but not
// forwarded: the agent must not get a part for the whole.
func (p *Proxy) handle(b *batch) (isBeat bool) {
	if d, ok := b.kernelDrops(); ok {
		p.noteKernelDrops(uint64(d))
	}
	p.stats.datagrams.Add(uint64(b.n))
	var beats, malformed uint64
	for i := 0; i < b.n; i++ {
		dg := b.datagram(i)
		if p.tap != nil {
			p.tap(dg)
		}
		if b.truncated(i) {
			p.dropTruncated(b, i)
		}
		hit, why := p.match.scan(dg)
		if why != "" {
			if p.stats.malformed.Add(1) == 1 {
				p.log.Warn("malformed DogStatsD datagram (forwarded anyway; further ones are only counted)",
					"source", p.String(), "why", why, "datagram", quoteBounded(dg, 120))
			}
			malformed++
		}
		if hit {
			beats++
		}
	}
	p.stats.beats.Add(beats)
	return beats > 0
}

// dropTruncated counts datagram i, which the forwarder skips.
func (p *Proxy) dropTruncated(b *batch, i int) {
	if p.stats.dropped.Add(1) == 1 {
		p.log.Warn("DogStatsD datagram longer than 64 KiB: not forwarded (further ones are only counted)", "source", p.String())
	}
}

func quoteBounded(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q…", b[:n])
	}
	return fmt.Sprintf("%q", b)
}

func (p *Proxy) logStats() {
	st := p.Stats()
	p.log.Info("dogstatsd proxy stopped", "source", p.String(), "datagrams", st.Datagrams, "beats", st.Beats,
		"malformed", st.Malformed, "forwarded", st.Forwarded, "dropped", st.Dropped, "kernel_dropped", st.KernelDropped)
}

// logDrops logs, every LogEvery until done is closed, what was dropped
// since its last line, with the totals.
func (p *Proxy) logDrops(done <-chan struct{}) {
	every := p.cfg.LogEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last Stats // drops before Run count too
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		now := p.Stats()
		dk, dp := now.KernelDropped-last.KernelDropped, now.Dropped-last.Dropped
		if dk > 0 || dp > 0 {
			p.log.Warn("dogstatsd datagrams dropped", "source", p.String(),
				"kernel_dropped", dk, "proxy_dropped", dp, "received", now.Datagrams-last.Datagrams,
				"forwarded", now.Forwarded-last.Forwarded, "kernel_dropped_total", now.KernelDropped,
				"proxy_dropped_total", now.Dropped, "rcvbuf", p.rcvbuf.String())
		}
		last = now
	}
}

// forwarder sends the received batches to the agent from a goroutine of
// its own, so that a slow or absent agent delays reading the target's
// metrics by forwardTimeout at most: once it has held every batch that long, the
// receiver drops (and counts) what it reads.
type forwarder struct {
	network, addr string
	log           *slog.Logger
	queue         chan *batch
	sent, dropped atomic.Uint64
	warned        bool
}

const (
	forwardTimeout = 100 * time.Millisecond
	redialEvery    = time.Second
)

func newForwarder(network, addr string, log *slog.Logger) *forwarder {
	return &forwarder{network: network, addr: addr, log: log, queue: make(chan *batch, batches)}
}

// fconn is the connected socket to the agent.
type fconn struct {
	net.Conn
	rc syscall.RawConn
}

func (f *forwarder) run(ctx context.Context, free chan<- *batch) {
	var conn *fconn
	var lastDial time.Time
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		var b *batch
		select {
		case <-ctx.Done():
			f.flush(conn, free)
			return
		case b = <-f.queue:
		}
		if conn == nil && time.Since(lastDial) >= redialEvery {
			lastDial = time.Now()
			conn = f.dial()
		}
		if !f.forward(conn, b) && conn != nil && f.network == "unixgram" {
			conn.Close() // the agent may have restarted: dial again
			conn = nil
		}
		free <- b
	}
}

// flush sends what is queued when the proxy stops, without waiting on the
// agent.
func (f *forwarder) flush(conn *fconn, free chan<- *batch) {
	for {
		select {
		case b := <-f.queue:
			f.forward(conn, b)
			free <- b
		default:
			return
		}
	}
}

func (f *forwarder) dial() *fconn {
	c, err := net.DialTimeout(f.network, f.addr, forwardTimeout)
	if err != nil {
		f.warnOnce("cannot reach the agent to forward to", err)
		return nil
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		c.Close()
		f.warnOnce("cannot reach the agent to forward to", err)
		return nil
	}
	return &fconn{Conn: c, rc: rc}
}

// forward sends a batch, each datagram byte for byte, and reports whether
// the agent took them all. A datagram the agent refuses is skipped and
// counted; waiting for room ends forwardTimeout after it began, and what
// is left is counted.
func (f *forwarder) forward(conn *fconn, b *batch) bool {
	if conn == nil {
		f.dropped.Add(uint64(b.n))
		return false
	}
	b.armForSend()
	_ = conn.SetWriteDeadline(time.Now().Add(forwardTimeout))
	all := true
	for i := 0; i < b.n; {
		if b.truncated(i) {
			i++ // counted by the receiver
			continue
		}
		end := i + 1
		for end < b.n && !b.truncated(end) {
			end++
		}
		n, err := sendBatch(conn.rc, b, i, end)
		i += n
		f.sent.Add(uint64(n))
		if err == nil {
			continue
		}
		all = false
		f.warnOnce("forwarding a datagram failed", err)
		if errors.Is(err, os.ErrDeadlineExceeded) || !isTemporary(err) && f.network == "unixgram" {
			for ; i < b.n; i++ {
				if !b.truncated(i) {
					f.dropped.Add(1)
				}
			}
			return false
		}
		f.dropped.Add(1) // refused (ECONNREFUSED of an earlier one, ENOBUFS): skip it
		i++
	}
	return all
}

func (f *forwarder) warnOnce(msg string, err error) {
	if !f.warned {
		f.warned = true
		f.log.Warn(msg+" (further failures are only counted)", "forward", f.network+"://"+f.addr, "err", err)
	}
}
