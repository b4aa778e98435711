package tap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procwatch"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd"
)

// Tap reads the DogStatsD datagrams sent to one UDP port on this host.
type Tap struct {
	port uint16
	addr string
	log  *slog.Logger
	f    *os.File
	own  *owners
	// senders names the sender of a datagram over loopback (nil: the
	// kernel refused its filter; own alone names senders).
	senders *senders

	// ring (and senders' ring) is read by Run only; it is unmapped when
	// Run returns, or by Close when Run never began.
	ring    *ring
	ringMu  sync.Mutex
	running bool
	closed  bool

	mu       sync.RWMutex
	subs     map[int]*sub               // by pid
	matchers []*dogstatsd.MetricMatcher // the subs' distinct ones

	packets, attributed, malformed, truncated atomic.Uint64
	drops                                     atomic.Uint64 // PACKET_STATISTICS, summed
	kernelSeen                                atomic.Uint64

	statsMu    sync.Mutex
	dropsShown uint64

	closeOnce sync.Once
}

// sub is one watched process.
type sub struct {
	pid       int
	match     *dogstatsd.MetricMatcher
	container string // its container id, for |c:ID
	cgroupIno string // "in-INODE" of its cgroup, for |c:in-INODE
	beat      func()
}

// Stats are a tap's counts since it opened.
type Stats struct {
	Packets    uint64 // datagrams to the port the filter passed
	Attributed uint64 // of them, sent by a watched process
	Malformed  uint64 // packets that were not a well-formed UDP datagram
	Truncated  uint64 // datagrams cut (fragmented, or larger than the capture)
	// KernelDrops are datagrams the kernel could not queue to the tap
	// (its buffer was full): heartbeats may have been missed.
	KernelDrops uint64
}

// ParseAddr reads a tap address: "udp://:8125", "udp://127.0.0.1:8125",
// ":8125" or "8125". Only the port matters: the tap sees datagrams to it
// on every address of the host.
func ParseAddr(s string) (port uint16, err error) {
	rest := strings.TrimPrefix(s, "udp://")
	if strings.Contains(rest, "://") {
		return 0, fmt.Errorf("tap address %q: UDP only (udp://:8125); a unix socket needs the proxy, --heartbeat-statsd", s)
	}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		rest = rest[i+1:]
	}
	n, err := strconv.ParseUint(rest, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("tap address %q: want a UDP port (udp://:8125, :8125 or 8125)", s)
	}
	return uint16(n), nil
}

// Open opens a packet socket for datagrams to the port addr names. It
// needs CAP_NET_RAW.
func Open(addr string, log *slog.Logger) (*Tap, error) {
	port, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Protocol 0 receives nothing until bind: the filter is in place
	// before the first packet is queued.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if perms.IsPermission(err) {
			return nil, perms.Explain(perms.PacketSocket, "tap "+addr+": open a packet socket", err)
		}
		return nil, fmt.Errorf("tap %s: open a packet socket: %w", addr, err)
	}
	own := newOwners()
	snd, err := openSenders(port, own.loopbackIndex())
	if err == nil {
		if err = snd.attach(fd); err != nil {
			snd.close()
			snd.unmap()
		}
	}
	if err != nil {
		snd = nil
		log.Info("the tap names a datagram's sender by its socket only (the kernel refused the filter that sees who sends)", "tap", addr, "err", err)
		prog := filter(port)
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("tap %s: attaching the packet filter: %w", addr, err)
		}
	}
	closeSenders := func() {
		if snd != nil {
			snd.close()
			snd.unmap()
		}
	}
	rg, err := setupRing(fd)
	if err != nil {
		unix.Close(fd)
		closeSenders()
		return nil, fmt.Errorf("tap %s: %w", addr, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL)}); err != nil {
		rg.unmap()
		unix.Close(fd)
		closeSenders()
		return nil, fmt.Errorf("tap %s: bind: %w", addr, err)
	}
	own.onShared = func(inode uint64, pids []int) {
		if snd != nil {
			return // over loopback the kernel tells them apart
		}
		log.Warn("watched processes share a socket: the tap cannot tell their datagrams apart, and each beats them all",
			"tap", addr, "socket", inode, "pids", pids)
	}
	return &Tap{port: port, addr: addr, log: log, f: os.NewFile(uintptr(fd), "packet-tap"), ring: rg, own: own, senders: snd, subs: map[int]*sub{}}, nil
}

// htons turns a protocol number into network order, as struct
// sockaddr_ll holds it.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// Port is the UDP port the tap reads.
func (t *Tap) Port() uint16 { return t.port }

// Close closes the socket; Run returns.
func (t *Tap) Close() error {
	var err error
	t.closeOnce.Do(func() {
		err = t.f.Close()
		if t.senders != nil {
			t.senders.close()
		}
		t.ringMu.Lock()
		t.closed = true
		if !t.running {
			t.unmapRings()
		}
		t.ringMu.Unlock()
	})
	return err
}

// Stats returns the counts so far.
func (t *Tap) Stats() Stats {
	t.readKernelStats()
	return Stats{
		Packets: t.packets.Load(), Attributed: t.attributed.Load(), Malformed: t.malformed.Load(),
		Truncated: t.truncated.Load(), KernelDrops: t.drops.Load(),
	}
}

// readKernelStats adds the kernel's counts (which reset on each read) and
// logs new drops.
func (t *Tap) readKernelStats() {
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	rc, err := t.f.SyscallConn()
	if err != nil {
		return
	}
	var st *unix.TpacketStats
	_ = rc.Control(func(fd uintptr) {
		st, err = unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS)
	})
	if err != nil || st == nil {
		return
	}
	t.kernelSeen.Add(uint64(st.Packets))
	drops := t.drops.Add(uint64(st.Drops))
	if drops > t.dropsShown {
		t.log.Warn("the kernel dropped DogStatsD datagrams the tap had no room for: heartbeats may have been missed",
			"tap", t.addr, "dropped", drops-t.dropsShown, "dropped_total", drops)
		t.dropsShown = drops
	}
}

// Run reads datagrams until ctx is done or the tap is closed.
func (t *Tap) Run(ctx context.Context) error {
	t.ringMu.Lock()
	if t.closed || t.running {
		t.ringMu.Unlock()
		return nil
	}
	t.running = true
	t.ringMu.Unlock()
	defer func() {
		t.ringMu.Lock()
		t.unmapRings()
		t.ringMu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { t.Close() })
	defer stop()
	rc, err := t.f.SyscallConn()
	if err != nil {
		return err
	}
	go t.watchStats(ctx)
	// One Read for the tap's life: the poller's readiness is reset only
	// when a Read begins, so a block handed over between two Reads could
	// otherwise wait for the next one. f never returns true: Close ends
	// the wait with an error.
	err = rc.Read(func(uintptr) bool {
		if t.senders != nil {
			t.senders.collect()
		}
		t.ring.drain(t.handleFrame)
		return false
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil || errors.Is(err, os.ErrClosed) {
		return nil
	}
	return fmt.Errorf("tap %s: %w", t.addr, err)
}

// unmapRings unmaps the packet ring and the senders' ring; t.ringMu is
// held.
func (t *Tap) unmapRings() {
	t.ring.unmap()
	if t.senders != nil {
		t.senders.unmap()
	}
}

// handleFrame takes one packet of the ring.
func (t *Tap) handleFrame(pkt []byte, proto uint16, pkttype uint8, ifindex int) {
	if pkttype == unix.PACKET_OUTGOING {
		return
	}
	t.handle(pkt, proto, ifindex)
}

// watchStats reads the kernel's drop count every 10 s.
func (t *Tap) watchStats(ctx context.Context) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.readKernelStats()
		}
	}
}

// handle attributes one packet and beats its sender's heartbeat.
func (t *Tap) handle(pkt []byte, proto uint16, ifindex int) {
	dg, ok := ParsePacket(pkt, proto)
	if !ok || dg.DstPort != t.port {
		t.malformed.Add(1)
		return
	}
	t.packets.Add(1)
	if dg.Truncated {
		t.truncated.Add(1)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(t.subs) == 0 {
		return
	}
	or := origin{ifindex: ifindex, v6: proto == protoIPv6, src: dg.Src}
	var pids []int
	// The kernel's word on who sent it is asked only of a datagram that
	// is some watched process's heartbeat metric.
	if sender := t.sender(pkt, proto, ifindex, dg.Payload); sender > 0 {
		pids = []int{sender} // the kernel saw it send: whoever holds the socket
	} else {
		pids = t.own.lookup(or, t.pidsLocked)
	}
	if len(pids) == 0 {
		if s := t.byContainer(ContainerField(dg.Payload), or); s != nil {
			pids = []int{s.pid}
		}
	}
	counted := false
	for _, pid := range pids {
		s := t.subs[pid]
		if s == nil {
			continue
		}
		if !counted {
			t.attributed.Add(1)
			counted = true
		}
		if beat, _ := s.match.Scan(dg.Payload); beat {
			s.beat()
		}
	}
}

// sender is the process the kernel saw send a datagram that came over
// loopback (senders) and carries a metric some watched process beats
// with; 0 when it did not see it or it is no heartbeat, and the tables
// say. t.mu is held.
func (t *Tap) sender(pkt []byte, proto uint16, ifindex int, payload []byte) int {
	if t.senders == nil || !t.own.loopback[ifindex] {
		return 0
	}
	heartbeat := false
	for _, m := range t.matchers {
		if beat, _ := m.Scan(payload); beat {
			heartbeat = true
			break
		}
	}
	if !heartbeat {
		return 0
	}
	return t.senders.lookup(pkt, proto)
}

// matchersLocked lists the watched processes' distinct metric matchers;
// t.mu is held for writing.
func (t *Tap) matchersLocked() []*dogstatsd.MetricMatcher {
	seen := map[string]bool{}
	var out []*dogstatsd.MetricMatcher
	for _, s := range t.subs {
		if k := s.match.String(); !seen[k] {
			seen[k] = true
			out = append(out, s.match)
		}
	}
	return out
}

// pidsLocked lists the watched pids; t.mu is held.
func (t *Tap) pidsLocked() []int {
	pids := make([]int, 0, len(t.subs))
	for pid := range t.subs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// byContainer finds the one watched process of the container a
// datagram's |c: field names, when the datagram came from that process's
// own network namespace (not the tap's: anyone on the host can write a
// container's id); nil when none, or several, are.
func (t *Tap) byContainer(c []byte, or origin) *sub {
	if len(c) == 0 {
		return nil
	}
	ns := t.own.originNamespace(or)
	if ns == 0 {
		return nil
	}
	var found *sub
	for _, s := range t.subs {
		if ((s.container != "" && string(c) == s.container) || (s.cgroupIno != "" && string(c) == s.cgroupIno)) && t.own.inNamespace(s.pid, ns) {
			if found != nil {
				return nil
			}
			found = s
		}
	}
	return found
}

// Source returns the heartbeat of process pid: a datagram it sends to
// the tap's port with a metric that matches. It beats while its Run runs.
func (t *Tap) Source(pid int, match *dogstatsd.MetricMatcher) *Source {
	return &Source{t: t, pid: pid, match: match}
}

// Source is one process's heartbeat on a tap; it implements
// watchdog.Source.
type Source struct {
	t     *Tap
	pid   int
	match *dogstatsd.MetricMatcher
}

func (s *Source) String() string {
	return fmt.Sprintf("dogstatsd tap :%d (%s)", s.t.port, s.match)
}

// Run implements watchdog.Source.
func (s *Source) Run(ctx context.Context, beat func()) error {
	sb := &sub{pid: s.pid, match: s.match, beat: beat}
	if f, err := procwatch.Read(s.pid); err == nil {
		sb.container = f.ContainerID
		sb.cgroupIno = cgroupInode(f.Cgroup)
	}
	s.t.mu.Lock()
	if _, dup := s.t.subs[s.pid]; dup {
		s.t.mu.Unlock()
		return fmt.Errorf("pid %d has a tap heartbeat on :%d already", s.pid, s.t.port)
	}
	s.t.subs[s.pid] = sb
	s.t.matchers = s.t.matchersLocked()
	s.t.mu.Unlock()
	s.t.own.invalidate()
	<-ctx.Done()
	s.t.mu.Lock()
	delete(s.t.subs, s.pid)
	s.t.matchers = s.t.matchersLocked()
	s.t.mu.Unlock()
	return ctx.Err()
}

// cgroupInode is "in-INODE" for a cgroup v2 path: what DogStatsD clients
// in a private cgroup namespace send as their container field.
func cgroupInode(cgroup string) string {
	if cgroup == "" {
		return ""
	}
	var st unix.Stat_t
	if unix.Stat("/sys/fs/cgroup"+cgroup, &st) != nil {
		return ""
	}
	return "in-" + strconv.FormatUint(st.Ino, 10)
}

// Watching reports how many processes have a heartbeat on the tap.
func (t *Tap) Watching() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.subs)
}
