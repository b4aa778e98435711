package fdtarget

import (
	"bufio"
	"errors"
	"os"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// tableOf is the /proc/<pid>/net table of a socket protocol, and whether
// its addresses are IPv6.
func tableOf(proto string) (table string, v6 bool, ok bool) {
	switch proto {
	case "TCP":
		return "tcp", false, true
	case "TCPv6":
		return "tcp6", true, true
	case "UDP":
		return "udp", false, true
	case "UDPv6":
		return "udp6", true, true
	}
	return "", false, false
}

func isUnix(proto string) bool {
	return proto == "UNIX" || proto == "UNIX-STREAM" || proto == "UNIX-DGRAM"
}

// sockets fills every socket target from its namespace's tables and
// sock_diag.
func (r *resolver) sockets() {
	tables := map[string][]*Target{}
	var unixes []*Target
	for _, t := range r.all {
		if t.Socket == nil {
			continue
		}
		if table, _, ok := tableOf(t.Socket.Proto); ok {
			tables[table] = append(tables[table], t)
		} else if isUnix(t.Socket.Proto) {
			unixes = append(unixes, t)
		}
	}
	var connected []*Target
	for table, ts := range tables {
		_, v6, _ := tableOf(ts[0].Socket.Proto)
		r.inetTable(table, v6, ts)
		for _, t := range ts {
			if t.Socket.Found && t.Socket.Remote.Port() != 0 {
				connected = append(connected, t)
			}
		}
	}
	if len(connected) > 0 {
		r.inetPeers(connected)
	}
	if len(unixes) > 0 {
		r.unixSockets(unixes)
	}
}

// scanNet reads /proc/<pid>/net/<table>, calling f per socket until it
// returns false.
func (r *resolver) scanNet(table string, v6 bool, f func(InetSocket) bool) {
	name := procfs.PidPath(r.pid, "net", table)
	file, err := os.Open(name)
	if err != nil {
		r.res.note("sockets of %s unknown: %v", table, err)
		return
	}
	defer file.Close()
	truncated, err := scanTable(bufio.NewReaderSize(file, 64<<10), v6, r.opts.MaxTableBytes, f)
	if err != nil {
		r.res.note("reading %s: %v", name, err)
	}
	if truncated {
		r.res.note("%s is larger than %d MiB: only its beginning was read", name, r.opts.MaxTableBytes>>20)
	}
}

// inetTable finds the sockets ts in table.
func (r *resolver) inetTable(table string, v6 bool, ts []*Target) {
	want := map[uint64][]*Target{}
	for _, t := range ts {
		want[t.Inode] = append(want[t.Inode], t)
	}
	left := len(want)
	r.scanNet(table, v6, func(s InetSocket) bool {
		for _, t := range want[s.Inode] {
			fillInet(t.Socket, s, table)
		}
		if _, ok := want[s.Inode]; ok && s.Inode != 0 {
			delete(want, s.Inode)
			left--
		}
		return left > 0
	})
}

func fillInet(so *Socket, s InetSocket, table string) {
	so.Found = true
	so.Local, so.Remote = s.Local, s.Remote
	so.RecvQ, so.SendQ, so.HasQueues = s.RxQueue, s.TxQueue, true
	so.State = StateName(s.State)
	if table == "udp" || table == "udp6" {
		so.State = "UNCONNECTED"
		if s.State == tcpEstablished {
			so.State = "CONNECTED"
		}
	}
}

// inetPeers finds, for each connected socket, the socket at the other
// end when it is in the same namespace (a connection over loopback, or
// to an address of this namespace): its inode, or the listener that has
// not accepted it yet. The peer of a TCP socket may be in either TCP
// table (a v4 client of a server listening on [::]).
func (r *resolver) inetPeers(ts []*Target) {
	type key struct{ local, remote string }
	byConn := map[key][]*Target{}
	byPort := map[uint16][]*Target{}
	for _, t := range ts {
		k := key{t.Socket.Remote.String(), t.Socket.Local.String()}
		byConn[k] = append(byConn[k], t)
		byPort[t.Socket.Remote.Port()] = append(byPort[t.Socket.Remote.Port()], t)
	}
	listeners := map[*Target]InetSocket{}
	unaccepted := map[*Target]bool{} // the peer is there, held by no socket yet
	for _, table := range peerTables(ts) {
		_, v6, _ := tableOf(table.proto)
		r.scanNet(table.name, v6, func(s InetSocket) bool {
			if s.State == tcpListen && table.tcp {
				for _, t := range byPort[s.Local.Port()] {
					if s.Local.Addr() == t.Socket.Remote.Addr() || s.Local.Addr().IsUnspecified() {
						listeners[t] = s
					}
				}
				return true
			}
			for _, t := range byConn[key{s.Local.String(), s.Remote.String()}] {
				switch {
				case s.Inode == t.Inode || !sameTransport(t.Socket.Proto, table.tcp):
				case s.Inode == 0 && s.State != tcpTimeWait:
					unaccepted[t] = true
				default:
					t.Socket.PeerInode = s.Inode
				}
			}
			return true
		})
	}
	for _, t := range ts {
		if t.Socket.PeerInode != 0 {
			continue
		}
		if l, ok := listeners[t]; ok && l.Inode != 0 && unaccepted[t] {
			// The peer exists but no process holds it yet: it waits in
			// its listener's queue, and the listener's holder is the
			// process that has not accepted it.
			t.Socket.NotAccepted, t.Socket.PeerInode = true, l.Inode
		}
	}
}

type peerTable struct {
	name, proto string
	tcp         bool
}

// peerTables are the tables the peers of ts may be in.
func peerTables(ts []*Target) []peerTable {
	tcp, udp := false, false
	for _, t := range ts {
		switch t.Socket.Proto {
		case "TCP", "TCPv6":
			tcp = true
		case "UDP", "UDPv6":
			udp = true
		}
	}
	var out []peerTable
	if tcp {
		out = append(out, peerTable{"tcp", "TCP", true}, peerTable{"tcp6", "TCPv6", true})
	}
	if udp {
		out = append(out, peerTable{"udp", "UDP", false}, peerTable{"udp6", "UDPv6", false})
	}
	return out
}

func sameTransport(proto string, tcp bool) bool {
	return (proto == "TCP" || proto == "TCPv6") == tcp
}

// unixStates names a UNIX socket's sock_diag state.
func unixState(s uint8) string {
	switch s {
	case tcpEstablished:
		return "CONNECTED"
	case tcpListen:
		return "LISTEN"
	case tcpClose:
		return "UNCONNECTED"
	case 2:
		return "CONNECTING"
	}
	return StateName(s)
}

func unixType(t int) string {
	switch t {
	case 1:
		return "stream"
	case 2:
		return "dgram"
	case 5:
		return "seqpacket"
	}
	return ""
}

// unixSockets asks sock_diag of the process's namespace for each UNIX
// socket and its peer; where it cannot be asked, /proc/<pid>/net/unix
// gives the name and state without a peer.
func (r *resolver) unixSockets(ts []*Target) {
	c, err := dialDiag(r.pid)
	if err != nil {
		r.res.note("UNIX sockets' peers unknown: %v", err)
		r.unixTable(ts)
		return
	}
	defer c.Close()
	for _, t := range ts {
		d, err := c.unix(t.Inode)
		if err != nil {
			if !errors.Is(err, errNoSocket) {
				r.res.note("UNIX socket %d: %v", t.Inode, err)
			}
			continue
		}
		so := t.Socket
		so.Found = true
		so.Type, so.State, so.Name = unixType(d.Type), unixState(d.State), d.Name
		so.PeerInode = d.Peer
		so.RecvQ, so.SendQ, so.HasQueues = uint64(d.RecvQ), uint64(d.SendQ), d.HasQueues
		if d.Peer != 0 {
			if p, err := c.unix(d.Peer); err == nil {
				so.PeerName = p.Name
			}
		}
	}
}

// unixTable fills UNIX sockets from /proc/<pid>/net/unix. A name may
// hold a newline, forging a line: an inode seen twice is not believed.
func (r *resolver) unixTable(ts []*Target) {
	name := procfs.PidPath(r.pid, "net", "unix")
	f, err := os.Open(name)
	if err != nil {
		r.res.note("UNIX sockets unknown: %v", err)
		return
	}
	defer f.Close()
	want := map[uint64][]*Target{}
	for _, t := range ts {
		want[t.Inode] = append(want[t.Inode], t)
	}
	seen := map[uint64]int{}
	found := map[uint64]UnixSocket{}
	sc := bufio.NewScanner(&limitReader{f, r.opts.MaxTableBytes})
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		u, ok := ParseUnixLine(sc.Bytes())
		if !ok {
			continue
		}
		if _, ok := want[u.Inode]; ok {
			seen[u.Inode]++
			found[u.Inode] = u
		}
	}
	for ino, u := range found {
		if seen[ino] != 1 {
			continue
		}
		for _, t := range want[ino] {
			so := t.Socket
			so.Found, so.Type, so.Name = true, unixType(u.Type), u.Path
			switch {
			case u.Listening:
				so.State = "LISTEN"
			case u.State == 3:
				so.State = "CONNECTED"
			case u.State == 2:
				so.State = "CONNECTING"
			default:
				so.State = "UNCONNECTED"
			}
		}
	}
}

// limitReader reads at most n bytes.
type limitReader struct {
	f *os.File
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("table larger than its bound")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}
