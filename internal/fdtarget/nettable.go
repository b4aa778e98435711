package fdtarget

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net/netip"
	"strconv"
)

// InetSocket is one line of /proc/<pid>/net/{tcp,tcp6,udp,udp6}: a socket
// of the network namespace, as the kernel prints it (tcp_ipv4.c
// get_tcp4_sock and its kin).
type InetSocket struct {
	Local, Remote netip.AddrPort
	// State is the kernel's TCP state number (TCP_ESTABLISHED 1 …
	// TCP_LISTEN 10); UDP sockets are TCP_CLOSE (7), or ESTABLISHED
	// once connected.
	State uint8
	// TxQueue and RxQueue: for a TCP connection the bytes sent and not
	// yet acknowledged and the bytes received and not yet read; for a
	// listening socket RxQueue is the connections waiting to be accepted
	// and TxQueue the backlog; for UDP the bytes of the send and receive
	// buffers in use.
	TxQueue, RxQueue uint64
	// Retransmits counts unrecovered retransmissions (TCP).
	Retransmits uint64
	UID         uint32
	// Inode is the socket's inode, the N of "socket:[N]"; 0 for a
	// connection no process has accepted yet or one in TIME_WAIT.
	Inode uint64
}

// tcpStates names the kernel's TCP states (include/net/tcp_states.h).
var tcpStates = [...]string{1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING", 12: "NEW_SYN_RECV"}

const (
	tcpEstablished = 1
	tcpTimeWait    = 6
	tcpClose       = 7
	tcpListen      = 10
)

// StateName names a TCP state number.
func StateName(s uint8) string {
	if int(s) < len(tcpStates) && tcpStates[s] != "" {
		return tcpStates[s]
	}
	return "state " + strconv.Itoa(int(s))
}

// ParseInetLine parses one line of a tcp/udp table (v6 for tcp6, udp6);
// false for the header and malformed lines. The line is
// "sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...".
func ParseInetLine(line []byte, v6 bool) (InetSocket, bool) {
	var f [10][]byte
	n := 0
	for rest := line; n < len(f); n++ {
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			i = len(rest)
		}
		if i == 0 {
			break
		}
		f[n], rest = rest[:i], rest[i:]
	}
	if n < len(f) || len(f[0]) < 2 || f[0][len(f[0])-1] != ':' {
		return InetSocket{}, false
	}
	var s InetSocket
	var ok bool
	if s.Local, ok = parseAddrPort(f[1], v6); !ok {
		return InetSocket{}, false
	}
	if s.Remote, ok = parseAddrPort(f[2], v6); !ok {
		return InetSocket{}, false
	}
	st, err := strconv.ParseUint(string(f[3]), 16, 8)
	if err != nil {
		return InetSocket{}, false
	}
	s.State = uint8(st)
	tx, rx, ok := bytes.Cut(f[4], []byte{':'})
	if !ok {
		return InetSocket{}, false
	}
	if s.TxQueue, err = strconv.ParseUint(string(tx), 16, 64); err != nil {
		return InetSocket{}, false
	}
	if s.RxQueue, err = strconv.ParseUint(string(rx), 16, 64); err != nil {
		return InetSocket{}, false
	}
	s.Retransmits, _ = strconv.ParseUint(string(f[6]), 16, 64)
	uid, _ := strconv.ParseUint(string(f[7]), 10, 32)
	s.UID = uint32(uid)
	if s.Inode, err = strconv.ParseUint(string(f[9]), 10, 64); err != nil {
		return InetSocket{}, false
	}
	return s, true
}

// parseAddrPort reads the kernel's "%08X:%04X" (IPv4) or
// "%08X%08X%08X%08X:%04X" (IPv6): the address as 32-bit words printed in
// host order, the port as a number.
func parseAddrPort(b []byte, v6 bool) (netip.AddrPort, bool) {
	addr, port, ok := bytes.Cut(b, []byte{':'})
	n := 4
	if v6 {
		n = 16
	}
	if !ok || len(addr) != 2*n || len(port) != 4 {
		return netip.AddrPort{}, false
	}
	var raw, ip [16]byte
	if _, err := hex.Decode(raw[:n], addr); err != nil {
		return netip.AddrPort{}, false
	}
	for w := 0; w < n/4; w++ {
		binary.NativeEndian.PutUint32(ip[4*w:], binary.BigEndian.Uint32(raw[4*w:]))
	}
	p, err := strconv.ParseUint(string(port), 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	a := netip.AddrFrom4([4]byte(ip[:4]))
	if v6 {
		// v4-mapped addresses compare with the v4 table's.
		a = netip.AddrFrom16(ip).Unmap()
	}
	return netip.AddrPortFrom(a, uint16(p)), true
}

// maxLine bounds a table line (a tcp6 line is about 180 bytes).
const maxLine = 4096

// scanTable calls f for every socket of a table read from r, until f
// returns false or maxBytes are read; truncated says the table was
// longer.
func scanTable(r io.Reader, v6 bool, maxBytes int64, f func(InetSocket) bool) (truncated bool, err error) {
	lr := &io.LimitedReader{R: r, N: maxBytes}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		if s, ok := ParseInetLine(sc.Bytes(), v6); ok && !f(s) {
			return false, nil
		}
	}
	if err := sc.Err(); err != nil && err != bufio.ErrTooLong {
		return false, err
	}
	return lr.N <= 0, nil
}

// UnixSocket is one line of /proc/<pid>/net/unix ("Num RefCount Protocol
// Flags Type St Inode Path"): what the table says when sock_diag cannot
// be asked. It has no peer.
type UnixSocket struct {
	Inode     uint64
	Type      int // SOCK_STREAM 1, SOCK_DGRAM 2, SOCK_SEQPACKET 5
	State     int // SS_UNCONNECTED 1, SS_CONNECTING 2, SS_CONNECTED 3, SS_DISCONNECTING 4
	Listening bool
	// Path is the bound name: a file path, "@name" for an abstract one,
	// "" when unbound. A path may hold spaces (and newlines, which the
	// kernel prints as they are: a line that follows one is not
	// believed when its inode appears twice).
	Path string
}

// soAcceptcon is __SO_ACCEPTCON, the flag of a listening socket.
const soAcceptcon = 1 << 16

// ParseUnixLine parses a line of /proc/net/unix.
func ParseUnixLine(line []byte) (UnixSocket, bool) {
	var f [7][]byte
	rest := line
	for i := range f {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		if j == 0 {
			return UnixSocket{}, false
		}
		f[i], rest = rest[:j], rest[j:]
	}
	if len(f[0]) < 2 || f[0][len(f[0])-1] != ':' {
		return UnixSocket{}, false
	}
	var u UnixSocket
	flags, err1 := strconv.ParseUint(string(f[3]), 16, 32)
	typ, err2 := strconv.ParseUint(string(f[4]), 16, 16)
	st, err3 := strconv.ParseUint(string(f[5]), 16, 8)
	ino, err4 := strconv.ParseUint(string(f[6]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return UnixSocket{}, false
	}
	u.Inode, u.Type, u.State, u.Listening = ino, int(typ), int(st), flags&soAcceptcon != 0
	if len(rest) > 0 && rest[0] == ' ' {
		u.Path = string(rest[1:])
	}
	return u, true
}
