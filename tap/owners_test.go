package tap

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

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
	want := []UDPSocket{{netip.MustParseAddrPort("127.0.0.1:8125"), 4242}, {netip.MustParseAddrPort("0.0.0.0:5353"), 4343}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("udp: %v, want %v", got, want)
	}
	got = ParseUDPTable([]byte(udp6TableSample), true)
	want = []UDPSocket{{netip.MustParseAddrPort("[::1]:8125"), 5151}, {netip.MustParseAddrPort("127.0.0.1:40960"), 5252}}
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
		if pid := o.lookup(local, pids); pid != os.Getpid() {
			t.Errorf("%s: %v sent by pid %d, want ours %d", network, local, pid, os.Getpid())
		}
		other := netip.AddrPortFrom(local.Addr(), local.Port()+1)
		if pid := o.lookup(other, pids); pid != 0 {
			t.Errorf("%s: %v, a port we do not hold, attributed to %d", network, other, pid)
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
