package fdtarget

import (
	"bufio"
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// hostFile reads what this machine's kernel wrote (testdata/host/capture.py).
func hostFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "host", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseFdinfo(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want Fdinfo
	}{
		{"file (this machine)", hostFile(t, "fdinfo-file"), Fdinfo{Pos: 1221, Flags: 02100000, MntID: 27, Ino: 737}},
		{"pipe write end (this machine)", hostFile(t, "fdinfo-pipe-write"), Fdinfo{Flags: 02000001, MntID: 16, Ino: 559439}},
		{"eventfd (this machine, 6.18)", hostFile(t, "fdinfo-eventfd"), Fdinfo{Flags: 02, MntID: 17, Ino: 1038, Eventfd: &Eventfd{Count: 5, ID: 12, Semaphore: true}}},
		{"signalfd (this machine)", hostFile(t, "fdinfo-signalfd"), Fdinfo{Flags: 02, MntID: 17, Ino: 1038, Sigmask: 0x4200, HasSigmask: true}},
		{"timerfd (this machine)", hostFile(t, "fdinfo-timerfd"), Fdinfo{Flags: 02, MntID: 17, Ino: 1038,
			Timerfd: &Timerfd{Clock: 1, Value: 29*time.Second + 980283549, Interval: 1500 * time.Millisecond}}},
		{"epoll (this machine)", hostFile(t, "fdinfo-epoll"), Fdinfo{Flags: 02000002, MntID: 17, Ino: 1038, EpollCount: 3, Epoll: []EpollItem{
			{FD: 4, Events: 0x19, Data: 4, Ino: 0x8894f, Sdev: 0xf},
			{FD: 6, Events: 0x1d, Data: 6, Ino: 0x88950, Sdev: 9},
			{FD: 3, Events: 0x19, Data: 3, Ino: 0x40e, Sdev: 0x10},
		}}},
		// proc.rst 3.8's examples.
		{"proc.rst regular file with a lock", []byte("pos:\t0\nflags:\t0100002\nmnt_id:\t19\nino:\t63107\nlock:       1: FLOCK  ADVISORY  WRITE 359 00:13:11691 0 EOF\n"),
			Fdinfo{Flags: 0100002, MntID: 19, Ino: 63107}},
		{"proc.rst eventfd (count in hex)", []byte("pos:\t0\nflags:\t04002\nmnt_id:\t9\nino:\t63107\neventfd-count:\t5a\n"),
			Fdinfo{Flags: 04002, MntID: 9, Ino: 63107, Eventfd: &Eventfd{Count: 0x5a}}},
		{"proc.rst signalfd", []byte("pos:\t0\nflags:\t04002\nmnt_id:\t9\nino:\t63107\nsigmask:\t0000000000000200\n"),
			Fdinfo{Flags: 04002, MntID: 9, Ino: 63107, Sigmask: 0x200, HasSigmask: true}},
		{"proc.rst epoll", []byte("pos:\t0\nflags:\t02\nmnt_id:\t9\nino:\t63107\ntfd:        5 events:       1d data: ffffffffffffffff pos:0 ino:61af sdev:7\n"),
			Fdinfo{Flags: 02, MntID: 9, Ino: 63107, EpollCount: 1, Epoll: []EpollItem{{FD: 5, Events: 0x1d, Data: 1<<64 - 1, Ino: 0x61af, Sdev: 7}}}},
		{"proc.rst inotify (skipped)", []byte("pos:\t0\nflags:\t02000000\nmnt_id:\t9\nino:\t63107\ninotify wd:3 ino:9e7e sdev:800013 mask:800afce ignored_mask:0 fhandle-bytes:8 fhandle-type:1 f_handle:7e9e0000640d1b6d\n"),
			Fdinfo{Flags: 02000000, MntID: 9, Ino: 63107}},
		{"proc.rst timerfd", []byte("pos:\t0\nflags:\t02\nmnt_id:\t9\nino:\t63107\nclockid: 0\nticks: 0\nsettime flags: 01\nit_value: (0, 49406829)\nit_interval: (1, 0)\n"),
			Fdinfo{Flags: 02, MntID: 9, Ino: 63107, Timerfd: &Timerfd{Flags: 1, Value: 49406829, Interval: time.Second}}},
		{"pidfd", []byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1063\nPid:\t812\nNSpid:\t812\n"),
			Fdinfo{Flags: 02000002, MntID: 15, Ino: 1063, Pid: 812, HasPid: true}},
		{"garbage", []byte("pos: -x\ntfd: -3 events: zz\nit_value: (5, 2000000000)\nclockid: 0\n"), Fdinfo{EpollCount: 1, Timerfd: &Timerfd{}}},
	}
	for _, tt := range tests {
		if got := ParseFdinfo(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func TestParseInetTable(t *testing.T) {
	var got []InetSocket
	if _, err := scanTable(bytes.NewReader(hostFile(t, "net-tcp")), false, 1<<20, func(s InetSocket) bool {
		got = append(got, s)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("%d sockets, want 8 (the header skipped)", len(got))
	}
	lo := netip.MustParseAddr("127.0.0.1")
	want := []InetSocket{
		{Local: netip.AddrPortFrom(netip.IPv4Unspecified(), 2024), Remote: netip.AddrPortFrom(netip.IPv4Unspecified(), 0), State: tcpListen, Inode: 1667},
		{Local: netip.AddrPortFrom(lo, 0xC413), Remote: netip.AddrPortFrom(netip.IPv4Unspecified(), 0), State: tcpListen, Inode: 559442},
		{Local: netip.AddrPortFrom(lo, 0x8378), Remote: netip.AddrPortFrom(lo, 0xC413), State: tcpEstablished, Inode: 559443},
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("socket %d: %+v, want %+v", i, got[i], w)
		}
	}
	// The accepted end holds the 5 bytes sent and not yet read.
	for _, s := range got {
		if s.Inode == 559444 && (s.RxQueue != 5 || s.Remote.Port() != 0x8378) {
			t.Errorf("accepted socket %+v", s)
		}
	}
	var v6 []InetSocket
	if _, err := scanTable(bytes.NewReader(hostFile(t, "net-udp6")), true, 1<<20, func(s InetSocket) bool {
		v6 = append(v6, s)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(v6) != 1 || v6[0].Local != netip.MustParseAddrPort("[::1]:57822") || v6[0].State != tcpClose || v6[0].Inode != 559445 {
		t.Errorf("udp6 %+v", v6)
	}
	// A v4-mapped address reads as the v4 one (a v4 client of a server
	// on [::] is in the tcp6 table so).
	s, ok := ParseInetLine([]byte("   0: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:A0DB 01 00000000:00000000 00:00000000 00000000  1000        0 42 1"), true)
	if !ok || s.Local != netip.MustParseAddrPort("127.0.0.1:8080") || s.UID != 1000 {
		t.Errorf("v4-mapped: %+v, %v", s, ok)
	}
	for _, bad := range []string{"", "  sl  local_address rem_address", "   0: 0100007F:1F90 0100007F:A0DB 01 0:0 00:00000000 00000000 0 0 x 1",
		"   0: 0100007F 0100007F:A0DB 01 00000000:00000000 00:00000000 00000000 0 0 1 1"} {
		if s, ok := ParseInetLine([]byte(bad), false); ok {
			t.Errorf("%q parsed: %+v", bad, s)
		}
	}
	// A table larger than its bound says so.
	truncated, _ := scanTable(bytes.NewReader(hostFile(t, "net-tcp")), false, 300, func(InetSocket) bool { return true })
	if !truncated {
		t.Errorf("a 1,351-byte table read to 300 bytes is not said truncated")
	}
}

func TestParseUnixTable(t *testing.T) {
	sc := bufio.NewScanner(bytes.NewReader(hostFile(t, "net-unix")))
	byIno := map[uint64]UnixSocket{}
	for sc.Scan() {
		if u, ok := ParseUnixLine(sc.Bytes()); ok {
			byIno[u.Inode] = u
		}
	}
	if len(byIno) != 6 {
		t.Fatalf("%d sockets, want 6: %+v", len(byIno), byIno)
	}
	if u := byIno[559446]; !u.Listening || u.Type != 1 || u.State != 1 || filepath.Base(u.Path) != "a b.sock" {
		t.Errorf("listening socket with a space in its path: %+v", u)
	}
	if u := byIno[559447]; u.Path != "@stallwatch-abstract" || u.Listening {
		t.Errorf("abstract socket: %+v", u)
	}
	if u := byIno[1663]; u.Path != "" || u.State != 3 {
		t.Errorf("unnamed connected socket: %+v", u)
	}
}

func TestParseDiagAnswer(t *testing.T) {
	// A SOCK_DIAG_BY_FAMILY answer as linux/unix_diag.h lays it out:
	// unix_diag_msg, then UNIX_DIAG_NAME (with the path's NUL),
	// UNIX_DIAG_PEER and UNIX_DIAG_RQLEN.
	msg := []byte{1, 1, 1, 0, 0x44, 0x33, 0x22, 0x11, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	attr := func(typ uint16, v []byte) []byte {
		l := 4 + len(v)
		b := append([]byte{byte(l), byte(l >> 8), byte(typ), byte(typ >> 8)}, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	body := append(append(append(msg, attr(unixDiagName, []byte("/run/a.sock\x00"))...),
		attr(unixDiagPeer, []byte{7, 0, 0, 0})...), attr(unixDiagRqlen, []byte{3, 0, 0, 0, 9, 0, 0, 0})...)
	hdr := make([]byte, 16)
	total := 16 + len(body)
	hdr[0], hdr[1] = byte(total), byte(total>>8)
	hdr[4] = 20 // SOCK_DIAG_BY_FAMILY
	hdr[8] = 5  // seq
	d, done, err := parseDiagAnswer(append(hdr, body...), 5)
	if err != nil || !done {
		t.Fatal(done, err)
	}
	want := UnixDiag{Inode: 0x11223344, Type: 1, State: 1, Name: "/run/a.sock", Peer: 7, RecvQ: 3, SendQ: 9, HasQueues: true}
	if d != want {
		t.Errorf("got %+v, want %+v", d, want)
	}
	if _, done, _ := parseDiagAnswer(append(hdr, body...), 6); done {
		t.Errorf("an answer to another request taken")
	}
	// NLMSG_ERROR with -ENOENT: no such socket.
	e := make([]byte, 20)
	e[0], e[4], e[8] = 20, 2, 5
	e[16], e[17], e[18], e[19] = 0xfe, 0xff, 0xff, 0xff
	if _, _, err := parseDiagAnswer(e, 5); err != errNoSocket {
		t.Errorf("ENOENT: %v", err)
	}
	if sunPath([]byte("\x00abstract\x00x")) != "@abstract@x" {
		t.Errorf("abstract name %q", sunPath([]byte("\x00abstract\x00x")))
	}
}
