package tap

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// UDPSocket is one line of /proc/net/udp or udp6: a socket's local
// address and inode, and which of the two tables it is in (V6: an
// AF_INET6 socket, whose v4-mapped addresses are given as IPv4).
type UDPSocket struct {
	Local netip.AddrPort
	Inode uint64
	V6    bool
}

// ParseUDPTable reads /proc/net/udp or /proc/net/udp6 (v6 for the latter).
// Malformed lines are skipped.
func ParseUDPTable(b []byte, v6 bool) []UDPSocket {
	var out []UDPSocket
	first := true
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if first { // the header
			first = false
			continue
		}
		f := bytes.Fields(line)
		if len(f) < 10 {
			continue
		}
		addr, port, ok := bytes.Cut(f[1], []byte{':'})
		if !ok {
			continue
		}
		ap, ok := parseProcAddr(addr, port, v6)
		if !ok {
			continue
		}
		ino, err := strconv.ParseUint(string(f[9]), 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		out = append(out, UDPSocket{Local: ap, Inode: ino, V6: v6})
	}
	return out
}

// parseProcAddr reads the kernel's "%08X:%04X" (IPv4) or "%08X%08X%08X%08X:%04X"
// (IPv6): the address as 32-bit words in host order, the port as a number.
func parseProcAddr(addr, port []byte, v6 bool) (netip.AddrPort, bool) {
	n := 4
	if v6 {
		n = 16
	}
	if len(addr) != 2*n || len(port) != 4 {
		return netip.AddrPort{}, false
	}
	var raw [16]byte
	if _, err := hex.Decode(raw[:n], addr); err != nil {
		return netip.AddrPort{}, false
	}
	// Each word was printed as a number; its bytes in memory (native
	// order) are the address's bytes in network order.
	var ip [16]byte
	for w := 0; w < n/4; w++ {
		binary.NativeEndian.PutUint32(ip[4*w:], binary.BigEndian.Uint32(raw[4*w:]))
	}
	p, err := strconv.ParseUint(string(port), 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	var a netip.Addr
	if v6 {
		a = netip.AddrFrom16(ip).Unmap()
	} else {
		a = netip.AddrFrom4([4]byte(ip[:4]))
	}
	return netip.AddrPortFrom(a, uint16(p)), true
}

// socketInodes returns the inodes of the sockets process pid has open,
// each with one of its descriptors for it. /proc/PID/fd is its owner's
// alone (mode 0500: CAP_SYS_PTRACE does not open it to another user);
// /proc/PID/fdinfo is open to a tracer, and names each file's inode.
func socketInodes(pid int) map[uint64]int {
	dir := procfs.PidPath(pid, "fd")
	d, err := os.Open(dir)
	if err != nil {
		return socketInodesFromFdinfo(pid)
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	inodes := map[uint64]int{}
	for _, n := range names {
		link, err := os.Readlink(dir + "/" + n)
		if err != nil || !strings.HasPrefix(link, "socket:[") || !strings.HasSuffix(link, "]") {
			continue
		}
		fd, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if ino, err := strconv.ParseUint(link[len("socket:["):len(link)-1], 10, 64); err == nil {
			inodes[ino] = fd
		}
	}
	return inodes
}

// socketInodesFromFdinfo finds the inodes of pid's sockets in
// /proc/PID/fdinfo ("ino:" lines, Linux 5.14 and later). It cannot tell a
// socket from another file: an inode that is not a UDP socket's matches
// nothing in the UDP tables.
func socketInodesFromFdinfo(pid int) map[uint64]int {
	dir := procfs.PidPath(pid, "fdinfo")
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	inodes := map[uint64]int{}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := procfs.ReadLimited(dir+"/"+n, 64<<10)
		if err != nil {
			continue
		}
		if ino, ok := fdinfoInode(b); ok {
			inodes[ino] = fd
		}
	}
	return inodes
}

// fdinfoInode reads the "ino:" line of an fdinfo file.
func fdinfoInode(b []byte) (uint64, bool) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if v, ok := bytes.CutPrefix(line, []byte("ino:")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil && n != 0
		}
	}
	return 0, false
}

// udpTables reads the UDP sockets of pid's network namespace.
func udpTables(pid int) []UDPSocket {
	var out []UDPSocket
	for _, t := range []struct {
		name string
		v6   bool
	}{{"udp", false}, {"udp6", true}} {
		if b, err := procfs.ReadLimited(procfs.PidPath(pid, "net", t.name), 16<<20); err == nil {
			out = append(out, ParseUDPTable(b, t.v6)...)
		}
	}
	return out
}

// localAddrs reads the addresses of pid's network namespace: IPv4 from
// the routing trie's LOCAL entries (/proc/PID/net/fib_trie), IPv6 from
// /proc/PID/net/if_inet6.
func localAddrs(pid int) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	if b, err := procfs.ReadLimited(procfs.PidPath(pid, "net", "fib_trie"), 16<<20); err == nil {
		for a := range parseFibTrieLocal(b) {
			out[a] = true
		}
	}
	if b, err := procfs.ReadLimited(procfs.PidPath(pid, "net", "if_inet6"), 1<<20); err == nil {
		for a := range parseIfInet6(b) {
			out[a] = true
		}
	}
	return out
}

// parseFibTrieLocal yields the addresses fib_trie lists as "/32 host
// LOCAL": each follows its "|-- ADDR" line.
func parseFibTrieLocal(b []byte) map[netip.Addr]struct{} {
	out := map[netip.Addr]struct{}{}
	var last netip.Addr
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		line = bytes.TrimSpace(line)
		if a, ok := bytes.CutPrefix(line, []byte("|-- ")); ok {
			last, _ = netip.ParseAddr(string(a))
			continue
		}
		if last.Is4() && bytes.HasPrefix(line, []byte("/32 ")) && bytes.HasSuffix(line, []byte(" LOCAL")) {
			out[last] = struct{}{}
		}
	}
	return out
}

// parseIfInet6 yields the addresses of /proc/net/if_inet6 (32 hex digits
// first on each line).
func parseIfInet6(b []byte) map[netip.Addr]struct{} {
	out := map[netip.Addr]struct{}{}
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		f := bytes.Fields(line)
		if len(f) == 0 || len(f[0]) != 32 {
			continue
		}
		var raw [16]byte
		if _, err := hex.Decode(raw[:], f[0]); err != nil {
			continue
		}
		out[netip.AddrFrom16(raw)] = struct{}{}
	}
	return out
}

// netnsOf is the inode of pid's network namespace (0: unknown).
func netnsOf(pid int) uint64 {
	var st unix.Stat_t
	if unix.Stat(procfs.PidPath(pid, "ns", "net"), &st) != nil {
		return 0
	}
	return st.Ino
}

// origin is what a packet says of where it came from.
type origin struct {
	ifindex int            // the interface it arrived on, in the tap's namespace
	v6      bool           // IPv6, else IPv4
	src     netip.AddrPort // source address and port
}

// nsSockets is what is known of one network namespace: its UDP sockets
// and, for a namespace other than the tap's, its own addresses.
type nsSockets struct {
	pid     int // a watched process in it, whose /proc/PID/net is read
	sockets []UDPSocket
	local   map[netip.Addr]bool
}

// owners names the watched processes that hold the socket a datagram was
// sent from. A datagram beats only for the socket that can have sent it:
// in the network namespace it came from (the tap's own when it arrived on
// loopback, else the namespace whose address is its source), of its
// family, bound to its source address (or the wildcard) and port. When
// some such socket is held by no watched process, the datagram is no
// one's: that process may be the sender.
type owners struct {
	tapNS    uint64       // the tap's own network namespace
	loopback map[int]bool // its loopback interfaces

	mu       sync.Mutex
	pids     []int
	nsOf     map[int]uint64         // watched pid → its network namespace
	inodes   map[int]map[uint64]int // watched pid → its socket inodes → a descriptor
	holders  map[uint64][]int       // socket inode → the watched pids that hold it
	tables   map[uint64]*nsSockets
	cache    map[origin][]int // since the tables were read; nil: no one's
	stale    bool             // the watched processes changed
	last     time.Time
	minEvery time.Duration
	onShared func(inode uint64, pids []int) // a socket several watched processes hold, once each
	shared   map[uint64]bool
	v6only   map[uint64]bool // AF_INET6 wildcard sockets of watched processes: IPV6_V6ONLY
}

func newOwners() *owners {
	o := &owners{tapNS: netnsOf(os.Getpid()), loopback: map[int]bool{}, stale: true, minEvery: time.Second, shared: map[uint64]bool{}, v6only: map[uint64]bool{}}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if i.Flags&net.FlagLoopback != 0 {
				o.loopback[i.Index] = true
			}
		}
	}
	return o
}

// loopbackIndex is the tap's namespace's loopback interface (0: none).
func (o *owners) loopbackIndex() int {
	for i := range o.loopback {
		return i
	}
	return 0
}

// invalidate makes the next datagram read the tables again at once.
func (o *owners) invalidate() {
	o.mu.Lock()
	o.stale = true
	o.mu.Unlock()
}

// lookup names the watched processes that hold the socket a datagram
// was sent from; nil: none. The tables are read again when the
// watched processes changed and at most once a second while datagrams
// come, so that a socket closed and its port taken by another process is
// its holder's no longer than that.
func (o *owners) lookup(or origin, pids func() []int) []int {
	or.src = netip.AddrPortFrom(or.src.Addr().Unmap(), or.src.Port())
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stale || time.Since(o.last) >= o.minEvery {
		o.refresh(pids())
	}
	if got, ok := o.cache[or]; ok {
		return got
	}
	got := o.resolve(or)
	if len(o.cache) < 1<<16 {
		o.cache[or] = got
	}
	return got
}

// namespaces are the network namespaces a datagram can have come from:
// the tap's own when it arrived on loopback (nothing sent from this
// namespace arrives any other way), else those of the watched processes
// whose own address is its source.
func (o *owners) namespaces(or origin) []uint64 {
	if o.loopback[or.ifindex] {
		return []uint64{o.tapNS}
	}
	if or.src.Addr().IsLoopback() || or.src.Addr().IsUnspecified() {
		return nil // a martian: no namespace sends that off its loopback
	}
	var out []uint64
	for ns, t := range o.tables {
		if ns != o.tapNS && t.local[or.src.Addr()] {
			out = append(out, ns)
		}
	}
	return out
}

// resolve finds the holders of the sockets that can have sent or.
func (o *owners) resolve(or origin) []int {
	var out []int
	for _, ns := range o.namespaces(or) {
		t := o.tables[ns]
		for _, s := range t.sockets {
			if !o.canSend(t, s, or) {
				continue
			}
			h := o.holders[s.Inode]
			if len(h) == 0 {
				return nil // an unwatched process's socket can send it
			}
			out = append(out, h...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// canSend says whether socket s of table t can send a datagram from
// or.src: its port, its family, its address or the wildcard. An AF_INET6
// socket bound to the wildcard sends IPv4 too unless IPV6_V6ONLY, which
// the table does not say: a watched process's is asked (v6only); another
// is dual-stack unless an AF_INET socket holds the port beside it (which
// the kernel allows only beside an IPv6-only one).
func (o *owners) canSend(t *nsSockets, s UDPSocket, or origin) bool {
	if s.Local.Port() != or.src.Port() {
		return false
	}
	a := s.Local.Addr()
	switch {
	case or.v6:
		return s.V6 && a.Is6() && (a == or.src.Addr() || a.IsUnspecified())
	case !s.V6:
		return a == or.src.Addr() || a.IsUnspecified()
	case a.Is4(): // a v4-mapped address
		return a == or.src.Addr()
	case !a.IsUnspecified():
		return false
	}
	if only, known := o.v6only[s.Inode]; known {
		return !only
	}
	for _, other := range t.sockets {
		if !other.V6 && other.Local.Port() == s.Local.Port() {
			return false
		}
	}
	return true
}

// inNamespace reports whether pid is in ns, a namespace other than the
// tap's (a datagram's container field is believed only from the
// container's own namespace).
func (o *owners) inNamespace(pid int, ns uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return ns != 0 && ns != o.tapNS && o.nsOf[pid] == ns
}

// originNamespace is the one namespace other than the tap's a datagram
// came from, or 0.
func (o *owners) originNamespace(or origin) uint64 {
	or.src = netip.AddrPortFrom(or.src.Addr().Unmap(), or.src.Port())
	o.mu.Lock()
	defer o.mu.Unlock()
	nss := o.namespaces(or)
	if len(nss) != 1 || nss[0] == o.tapNS {
		return 0
	}
	return nss[0]
}

// refresh reads the UDP tables of every watched process's namespace, and
// each process's sockets again when its namespace's sockets changed or
// the watched processes did.
func (o *owners) refresh(pids []int) {
	changed := o.stale || !slices.Equal(pids, o.pids)
	o.stale, o.last = false, time.Now()
	o.pids = slices.Clone(pids)
	nsOf := map[int]uint64{}
	tables := map[uint64]*nsSockets{}
	for _, pid := range pids {
		ns := netnsOf(pid)
		if ns == 0 {
			continue
		}
		nsOf[pid] = ns
		if _, ok := tables[ns]; ok {
			continue
		}
		t := &nsSockets{pid: pid, sockets: udpTables(pid)}
		if ns != o.tapNS {
			t.local = localAddrs(pid)
		}
		tables[ns] = t
		if old := o.tables[ns]; old == nil || !sameSockets(old.sockets, t.sockets) {
			changed = true
		}
	}
	o.tables, o.cache = tables, map[origin][]int{}
	if !changed && len(nsOf) == len(o.nsOf) {
		return
	}
	o.nsOf = nsOf
	o.inodes = map[int]map[uint64]int{}
	o.holders = map[uint64][]int{}
	for pid := range nsOf {
		o.inodes[pid] = socketInodes(pid)
	}
	v6only := map[uint64]bool{}
	for _, t := range tables {
		for _, s := range t.sockets {
			for pid, in := range o.inodes {
				fd, ok := in[s.Inode]
				if !ok {
					continue
				}
				o.holders[s.Inode] = append(o.holders[s.Inode], pid)
				if s.V6 && s.Local.Addr().Is6() && s.Local.Addr().IsUnspecified() {
					if only, known := o.v6only[s.Inode]; known {
						v6only[s.Inode] = only
					} else if only, err := socketV6Only(pid, fd); err == nil {
						v6only[s.Inode] = only
					}
				}
			}
		}
	}
	o.v6only = v6only
	for ino, h := range o.holders {
		slices.Sort(h)
		if len(h) > 1 && !o.shared[ino] && o.onShared != nil {
			o.shared[ino] = true
			o.onShared(ino, h)
		}
	}
}

// sameSockets reports whether two readings of a table list the same
// sockets (inode and local address), in the kernel's order.
func sameSockets(a, b []UDPSocket) bool {
	return slices.Equal(a, b)
}

// socketV6Only reads IPV6_V6ONLY of descriptor fd of process pid, from a
// duplicate of it (pidfd_getfd: the process's own descriptor is not
// touched, and closing the copy leaves the socket open).
func socketV6Only(pid, fd int) (bool, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(pidfd)
	dup, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(dup)
	v, err := unix.GetsockoptInt(dup, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
	return v != 0, err
}
