package tap

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// ipv4UDP builds an IPv4 packet carrying a UDP datagram.
func ipv4UDP(src netip.AddrPort, dport uint16, payload []byte, frag uint16) []byte {
	b := make([]byte, 20+8+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[6:], frag)
	b[8], b[9] = 64, 17
	s := src.Addr().As4()
	copy(b[12:], s[:])
	copy(b[16:], []byte{127, 0, 0, 1})
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload)
	return b
}

func ipv6UDP(src netip.AddrPort, dport uint16, payload []byte) []byte {
	b := make([]byte, 40+8+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	b[6], b[7] = 17, 64
	s := src.Addr().As16()
	copy(b[8:], s[:])
	b[39] = 1
	binary.BigEndian.PutUint16(b[40:], src.Port())
	binary.BigEndian.PutUint16(b[42:], dport)
	binary.BigEndian.PutUint16(b[44:], uint16(8+len(payload)))
	copy(b[48:], payload)
	return b
}

func TestParsePacket(t *testing.T) {
	src4 := netip.MustParseAddrPort("10.1.2.3:40000")
	src6 := netip.MustParseAddrPort("[fd00::7]:40001")
	body := []byte("app.beat:1|c|#env:prod\napp.other:2|g")
	for _, c := range []struct {
		name      string
		pkt       []byte
		proto     uint16
		ok        bool
		src       netip.AddrPort
		payload   string
		truncated bool
	}{
		{"ipv4", ipv4UDP(src4, 8125, body, 0), protoIPv4, true, src4, string(body), false},
		{"ipv6", ipv6UDP(src6, 8125, body), protoIPv6, true, src6, string(body), false},
		{"ipv4 padded", append(ipv4UDP(src4, 8125, body, 0), 0, 0, 0, 0), protoIPv4, true, src4, string(body), false},
		{"first fragment: complete lines only", ipv4UDP(src4, 8125, body, 0x2000), protoIPv4, true, src4, "app.beat:1|c|#env:prod\n", true},
		{"later fragment", ipv4UDP(src4, 8125, body, 0x0010), protoIPv4, false, netip.AddrPort{}, "", false},
		{"cut: complete lines only", ipv4UDP(src4, 8125, body, 0)[:20+8+30], protoIPv4, true, src4, "app.beat:1|c|#env:prod\n", true},
		{"tcp", func() []byte { p := ipv4UDP(src4, 8125, body, 0); p[9] = 6; return p }(), protoIPv4, false, netip.AddrPort{}, "", false},
		{"bad header length", func() []byte { p := ipv4UDP(src4, 8125, body, 0); p[0] = 0x4f; return p }(), protoIPv4, false, netip.AddrPort{}, "", false},
		{"short", []byte{0x45, 0}, protoIPv4, false, netip.AddrPort{}, "", false},
		{"udp length below its header", func() []byte { p := ipv4UDP(src4, 8125, body, 0); binary.BigEndian.PutUint16(p[24:], 4); return p }(), protoIPv4, false, netip.AddrPort{}, "", false},
		{"arp", make([]byte, 28), 0x0806, false, netip.AddrPort{}, "", false},
	} {
		dg, ok := ParsePacket(c.pkt, c.proto)
		if ok != c.ok {
			t.Errorf("%s: ok %v", c.name, ok)
			continue
		}
		if !ok {
			continue
		}
		if dg.Src != c.src || dg.DstPort != 8125 || string(dg.Payload) != c.payload || dg.Truncated != c.truncated {
			t.Errorf("%s: %v → :%d %q truncated %v", c.name, dg.Src, dg.DstPort, dg.Payload, dg.Truncated)
		}
	}
}

func TestContainerField(t *testing.T) {
	for in, want := range map[string]string{
		"a:1|c|#x:y|c:0123abcd":         "0123abcd",
		"a:1|c|c:in-4242|#x:y":          "in-4242",
		"a:1|c|#x:y\nb:1|c|c:elsewhere": "",
		"a:1|c":                         "",
	} {
		if got := string(ContainerField([]byte(in))); got != want {
			t.Errorf("ContainerField(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFilterAssembles checks the program's jumps resolve and that it ends
// in the two returns.
func TestFilterAssembles(t *testing.T) {
	p := filter(8125)
	n := len(p)
	if p[n-2].Code != unix.BPF_RET|unix.BPF_K || p[n-2].K != snapLen || p[n-1].K != 0 {
		t.Fatalf("program does not end in keep, drop: %+v", p[n-2:])
	}
	for i, in := range p {
		if in.Code&0x07 == unix.BPF_JMP && (i+1+int(in.Jt) >= n || i+1+int(in.Jf) >= n) {
			t.Errorf("instruction %d jumps past the end", i)
		}
	}
	if _, err := assemble([]insn{{code: unix.BPF_JMP | unix.BPF_JEQ, jt: "nowhere"}}); err == nil {
		t.Errorf("a jump to an unknown label assembled")
	}
}

func TestParseAddr(t *testing.T) {
	for in, want := range map[string]uint16{"udp://:8125": 8125, "udp://127.0.0.1:18125": 18125, ":8125": 8125, "8125": 8125, "udp://[::1]:9": 9} {
		if got, err := ParseAddr(in); err != nil || got != want {
			t.Errorf("ParseAddr(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "unix:///var/run/datadog/dsd.socket", "udp://:0", "udp://:70000", "x"} {
		if _, err := ParseAddr(in); err == nil {
			t.Errorf("ParseAddr(%q) accepted", in)
		}
	}
}

func FuzzParsePacket(f *testing.F) {
	src := netip.MustParseAddrPort("10.1.2.3:40000")
	f.Add(ipv4UDP(src, 8125, []byte("a:1|c"), 0), uint16(protoIPv4))
	f.Add(ipv6UDP(netip.MustParseAddrPort("[::1]:5"), 8125, []byte("a:1|c\nb")), uint16(protoIPv6))
	f.Add(ipv4UDP(src, 8125, []byte("a:1|c\nb:2"), 0x2000), uint16(protoIPv4))
	f.Fuzz(func(t *testing.T, pkt []byte, proto uint16) {
		dg, ok := ParsePacket(pkt, proto)
		if !ok {
			return
		}
		if len(dg.Payload) > len(pkt) {
			t.Fatalf("payload of %d bytes from a %d-byte packet", len(dg.Payload), len(pkt))
		}
		if dg.Truncated && len(dg.Payload) > 0 && dg.Payload[len(dg.Payload)-1] != '\n' {
			t.Fatalf("a truncated datagram ends mid-line: %q", dg.Payload)
		}
		_ = ContainerField(dg.Payload)
	})
}

func FuzzParseUDPTable(f *testing.F) {
	f.Add([]byte(udpTableSample), false)
	f.Add([]byte(udp6TableSample), true)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		for _, s := range ParseUDPTable(b, v6) {
			if s.Inode == 0 || !s.Local.IsValid() {
				t.Fatalf("socket %+v", s)
			}
		}
	})
}
