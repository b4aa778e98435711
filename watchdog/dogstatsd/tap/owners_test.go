package tap

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
)

// loopbackIndex is the index of this namespace's loopback interface.
func loopbackIndex(t *testing.T) int {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return i.Index
		}
	}
	t.Fatal("no loopback interface")
	return 0
}

const udpTableSample = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 0100007F:1FBD 0100007F:9C41 01 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0
  124: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 4343 2 0000000000000000 0
  bad line
`

const udp6TableSample = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  5: 00000000000000000000000001000000:1FBD 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 5151 2 0000000000000000 0
  6: 0000000000000000FFFF00000100007F:A000 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 5252 2 0000000000000000 0
`

func TestParseUDPTable(t *testing.T) {
	got := ParseUDPTable([]byte(udpTableSample), false)
	want := []UDPSocket{{netip.MustParseAddrPort("127.0.0.1:8125"), 4242, false}, {netip.MustParseAddrPort("0.0.0.0:5353"), 4343, false}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("udp: %v, want %v", got, want)
	}
	got = ParseUDPTable([]byte(udp6TableSample), true)
	want = []UDPSocket{{netip.MustParseAddrPort("[::1]:8125"), 5151, true}, {netip.MustParseAddrPort("127.0.0.1:40960"), 5252, true}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("udp6: %v, want %v", got, want)
	}
}

// TestOwnersOwnSocket finds a socket of this process, connected as the
// Datadog client connects its, in the kernel's own tables.
func TestOwnersOwnSocket(t *testing.T) {
	for _, network := range []string{"udp4", "udp6"} {
		addr := "127.0.0.1:9"
		if network == "udp6" {
			addr = "[::1]:9"
		}
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		local := c.LocalAddr().(*net.UDPAddr).AddrPort()
		o := newOwners()
		pids := func() []int { return []int{os.Getpid()} }
		lo := loopbackIndex(t)
		from := func(src netip.AddrPort) origin { return origin{ifindex: lo, v6: network == "udp6", src: src} }
		if got := o.lookup(from(local), pids); !slices.Equal(got, []int{os.Getpid()}) {
			t.Errorf("%s: %v sent by pids %v, want ours %d", network, local, got, os.Getpid())
		}
		other := netip.AddrPortFrom(local.Addr(), local.Port()+1)
		if got := o.lookup(from(other), pids); got != nil {
			t.Errorf("%s: %v, a port we do not hold, attributed to %v", network, other, got)
		}
		notLo := from(local)
		notLo.ifindex = lo + 1000
		if got := o.lookup(notLo, pids); got != nil {
			t.Errorf("%s: %v arriving off loopback attributed to %v", network, local, got)
		}
	}
}

// TestFdinfoInodes: the way in when /proc/PID/fd is closed to us (another
// user's process, with CAP_SYS_PTRACE only) finds the same sockets.
func TestFdinfoInodes(t *testing.T) {
	c, err := net.Dial("udp4", "127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	viaFd := socketInodes(os.Getpid())
	viaInfo := socketInodesFromFdinfo(os.Getpid())
	if len(viaFd) == 0 {
		t.Fatal("no socket found through /proc/self/fd")
	}
	for ino := range viaFd {
		if _, ok := viaInfo[ino]; !ok {
			t.Errorf("socket inode %d not found through fdinfo", ino)
		}
	}
	if n, ok := fdinfoInode([]byte("pos:\t0\nflags:\t02\nmnt_id:\t9\nino:\t4242\n")); !ok || n != 4242 {
		t.Errorf("fdinfoInode = %d, %v", n, ok)
	}
}

func TestLocalAddrParsers(t *testing.T) {
	const trie = `Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 198.18.0.0/30 2 0 2
           |-- 198.18.0.0
              /30 link UNICAST
           |-- 198.18.0.2
              /32 host LOCAL
`
	got := parseFibTrieLocal([]byte(trie))
	for _, a := range []string{"127.0.0.1", "198.18.0.2"} {
		if _, ok := got[netip.MustParseAddr(a)]; !ok {
			t.Errorf("fib_trie: %s missing from %v", a, got)
		}
	}
	if len(got) != 2 {
		t.Errorf("fib_trie: %v, want 2 local addresses (not the broadcast or the network)", got)
	}
	v6 := parseIfInet6([]byte("00000000000000000000000000000001 01 80 10 80       lo\nfd000000000000000000000000000002 04 40 00 82     eth0\nshort\n"))
	for _, a := range []string{"::1", "fd00::2"} {
		if _, ok := v6[netip.MustParseAddr(a)]; !ok {
			t.Errorf("if_inet6: %s missing from %v", a, v6)
		}
	}
	if len(v6) != 2 {
		t.Errorf("if_inet6: %v", v6)
	}
}
