package tap

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// UDPSocket is one line of /proc/net/udp or udp6: a socket's local
// address and inode.
type UDPSocket struct {
	Local netip.AddrPort
	Inode uint64
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
		out = append(out, UDPSocket{Local: ap, Inode: ino})
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

// socketInodes returns the inodes of the sockets process pid has open.
// /proc/PID/fd is its owner's alone (mode 0500: CAP_SYS_PTRACE does not
// open it to another user); /proc/PID/fdinfo is open to a tracer, and
// names each file's inode.
func socketInodes(pid int) map[uint64]struct{} {
	dir := procfs.PidPath(pid, "fd")
	d, err := os.Open(dir)
	if err != nil {
		return socketInodesFromFdinfo(pid)
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	inodes := map[uint64]struct{}{}
	for _, n := range names {
		link, err := os.Readlink(dir + "/" + n)
		if err != nil || !strings.HasPrefix(link, "socket:[") || !strings.HasSuffix(link, "]") {
			continue
		}
		if ino, err := strconv.ParseUint(link[len("socket:["):len(link)-1], 10, 64); err == nil {
			inodes[ino] = struct{}{}
		}
	}
	return inodes
}

// socketInodesFromFdinfo finds the inodes of pid's sockets in
// /proc/PID/fdinfo ("ino:" lines, Linux 5.14 and later). It cannot tell a
// socket from another file: an inode that is not a UDP socket's matches
// nothing in the UDP tables.
func socketInodesFromFdinfo(pid int) map[uint64]struct{} {
	dir := procfs.PidPath(pid, "fdinfo")
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	inodes := map[uint64]struct{}{}
	for _, n := range names {
		b, err := procfs.ReadLimited(dir+"/"+n, 64<<10)
		if err != nil {
			continue
		}
		if ino, ok := fdinfoInode(b); ok {
			inodes[ino] = struct{}{}
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

// owners maps a datagram's source to the watched process that sent it.
type owners struct {
	mu       sync.Mutex
	byAddr   map[netip.AddrPort]int // sockets bound to an address
	byPort   map[uint16][]int       // sockets bound to the wildcard address
	unknown  map[netip.AddrPort]struct{}
	stale    bool
	last     time.Time
	minEvery time.Duration
}

func newOwners() *owners {
	return &owners{byAddr: map[netip.AddrPort]int{}, byPort: map[uint16][]int{}, unknown: map[netip.AddrPort]struct{}{}, stale: true, minEvery: time.Second}
}

// invalidate makes the next unknown source read the tables again at once.
func (o *owners) invalidate() {
	o.mu.Lock()
	o.stale = true
	o.mu.Unlock()
}

// lookup names the watched process that sent from src, reading the
// tables of pids again when src is unknown (at most once a second).
// 0: none of them.
func (o *owners) lookup(src netip.AddrPort, pids func() []int) int {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	o.mu.Lock()
	defer o.mu.Unlock()
	if pid := o.find(src); pid != 0 {
		return pid
	}
	if _, known := o.unknown[src]; known && !o.stale {
		return 0
	}
	if !o.stale && time.Since(o.last) < o.minEvery {
		o.unknown[src] = struct{}{}
		return 0
	}
	o.refresh(pids())
	if pid := o.find(src); pid != 0 {
		return pid
	}
	if len(o.unknown) < 1<<16 {
		o.unknown[src] = struct{}{}
	}
	return 0
}

func (o *owners) find(src netip.AddrPort) int {
	if pid, ok := o.byAddr[src]; ok {
		return pid
	}
	if ps := o.byPort[src.Port()]; len(ps) == 1 {
		return ps[0]
	}
	return 0
}

// refresh reads the sockets of every pid, and the UDP table of each
// network namespace once.
func (o *owners) refresh(pids []int) {
	o.byAddr = map[netip.AddrPort]int{}
	o.byPort = map[uint16][]int{}
	o.unknown = map[netip.AddrPort]struct{}{}
	o.stale, o.last = false, time.Now()
	tables := map[string][]UDPSocket{}
	for _, pid := range pids {
		inodes := socketInodes(pid)
		if len(inodes) == 0 {
			continue
		}
		ns, err := os.Readlink(procfs.PidPath(pid, "ns", "net"))
		if err != nil {
			continue
		}
		table, ok := tables[ns]
		if !ok {
			table = udpTables(pid)
			tables[ns] = table
		}
		for _, s := range table {
			if _, mine := inodes[s.Inode]; !mine {
				continue
			}
			if s.Local.Addr().IsUnspecified() {
				o.byPort[s.Local.Port()] = append(o.byPort[s.Local.Port()], pid)
			} else {
				o.byAddr[s.Local] = pid
			}
		}
	}
}
