package tap

import (
	"encoding/binary"
	"net/netip"
)

// Ethernet protocol numbers of the network layer, as the packet socket
// gives them.
const (
	protoIPv4 = 0x0800
	protoIPv6 = 0x86dd
)

// Datagram is a UDP datagram read off a packet.
type Datagram struct {
	Src     netip.AddrPort
	DstPort uint16
	Payload []byte
	// Truncated: the packet holds less than the UDP header says (the
	// capture was cut, or this is the first fragment of several).
	Truncated bool
}

// ParsePacket reads a UDP datagram from a network-layer packet (IPv4 or
// IPv6, by proto). ok is false for anything else or anything malformed.
// Payload aliases b.
func ParsePacket(b []byte, proto uint16) (dg Datagram, ok bool) {
	var udp []byte
	switch proto {
	case protoIPv4:
		if len(b) < 20 || b[0]>>4 != 4 {
			return dg, false
		}
		ihl := int(b[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(b[2:]))
		if ihl < 20 || len(b) < ihl || total < ihl || b[9] != 17 {
			return dg, false
		}
		if binary.BigEndian.Uint16(b[6:])&0x1fff != 0 {
			return dg, false // a later fragment: no UDP header
		}
		if binary.BigEndian.Uint16(b[6:])&0x2000 != 0 {
			dg.Truncated = true // more fragments follow
		}
		src, _ := netip.AddrFromSlice(b[12:16])
		if total < len(b) {
			b = b[:total] // Ethernet padding
		}
		udp = b[ihl:]
		dg.Src = netip.AddrPortFrom(src, 0)
	case protoIPv6:
		if len(b) < 40 || b[0]>>4 != 6 || b[6] != 17 {
			return dg, false
		}
		payload := int(binary.BigEndian.Uint16(b[4:]))
		if 40+payload < len(b) {
			b = b[:40+payload]
		}
		src, _ := netip.AddrFromSlice(b[8:24])
		udp = b[40:]
		dg.Src = netip.AddrPortFrom(src, 0)
	default:
		return dg, false
	}
	if len(udp) < 8 {
		return dg, false
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < 8 {
		return dg, false
	}
	dg.Src = netip.AddrPortFrom(dg.Src.Addr(), binary.BigEndian.Uint16(udp[0:]))
	dg.DstPort = binary.BigEndian.Uint16(udp[2:])
	switch {
	case ulen > len(udp):
		dg.Truncated = true
	case ulen < len(udp):
		udp = udp[:ulen]
	}
	dg.Payload = udp[8:]
	if dg.Truncated {
		// A line cut in the middle could look like another metric:
		// only the lines that end within the capture are read.
		for i := len(dg.Payload) - 1; ; i-- {
			if i < 0 {
				dg.Payload = dg.Payload[:0]
				break
			}
			if dg.Payload[i] == '\n' {
				dg.Payload = dg.Payload[:i+1]
				break
			}
		}
	}
	return dg, true
}

// ContainerField returns the value of the first DogStatsD container field
// ("|c:VALUE") in a datagram's first line, or nil.
func ContainerField(payload []byte) []byte {
	line := payload
	for i, c := range payload {
		if c == '\n' {
			line = payload[:i]
			break
		}
	}
	for i := 0; i+3 <= len(line); i++ {
		if line[i] == '|' && line[i+1] == 'c' && line[i+2] == ':' {
			v := line[i+3:]
			for j, c := range v {
				if c == '|' {
					return v[:j]
				}
			}
			return v
		}
	}
	return nil
}
