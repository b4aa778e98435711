package tap

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Ancillary loads of classic BPF (linux/filter.h): skb fields a filter
// reads at a negative offset.
const (
	skfAdOff      = -0x1000
	skfAdProtocol = 0 // skb->protocol, in host order
	skfAdPkttype  = 4 // skb->pkt_type
)

// snapLen is how much of a packet the filter keeps: a whole UDP datagram.
const snapLen = 65535

// insn is one instruction of a program being assembled; jt and jf name
// labels ("" is the next instruction).
type insn struct {
	label  string
	code   uint16
	k      uint32
	jt, jf string
}

// assemble resolves the labels of a classic BPF program.
func assemble(prog []insn) ([]unix.SockFilter, error) {
	at := map[string]int{}
	for i, in := range prog {
		if in.label != "" {
			at[in.label] = i
		}
	}
	off := func(i int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		j, ok := at[label]
		if !ok || j <= i || j-i-1 > 255 {
			return 0, fmt.Errorf("bpf: bad jump from %d to %q", i, label)
		}
		return uint8(j - i - 1), nil
	}
	out := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		jt, err := off(i, in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := off(i, in.jf)
		if err != nil {
			return nil, err
		}
		out[i] = unix.SockFilter{Code: in.code, Jt: jt, Jf: jf, K: in.k}
	}
	return out, nil
}

// filter is the classic BPF program that keeps UDP datagrams to port,
// over IPv4 (not later fragments) or IPv6 (no extension headers), except
// the outgoing copy a packet socket sees of what this host sends (a
// loopback datagram is then seen once, as received). The packet socket is
// SOCK_DGRAM: offsets start at the network header.
func filter(port uint16) []unix.SockFilter {
	const (
		ldW    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ldH    = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		ldB    = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
		ldIndH = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
		ldxMsh = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
		jeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret    = unix.BPF_RET | unix.BPF_K
	)
	ad := func(off int32) uint32 { return uint32(skfAdOff + off) }
	p, err := assemble([]insn{
		{code: ldW, k: ad(skfAdPkttype)},
		{code: jeq, k: unix.PACKET_OUTGOING, jt: "drop"},
		{code: ldW, k: ad(skfAdProtocol)},
		{code: jeq, k: protoIPv4, jt: "v4"},
		{code: jeq, k: protoIPv6, jt: "v6", jf: "drop"},
		{label: "v4", code: ldB, k: 9}, // protocol
		{code: jeq, k: 17, jf: "drop"},
		{code: ldH, k: 6}, // flags, fragment offset
		{code: jset, k: 0x1fff, jt: "drop"},
		{code: ldxMsh, k: 0}, // X = header length
		{code: ldIndH, k: 2}, // destination port
		{code: jeq, k: uint32(port), jt: "keep", jf: "drop"},
		{label: "v6", code: ldB, k: 6}, // next header
		{code: jeq, k: 17, jf: "drop"},
		{code: ldH, k: 40 + 2}, // destination port
		{code: jeq, k: uint32(port), jt: "keep", jf: "drop"},
		{label: "keep", code: ret, k: snapLen},
		{label: "drop", code: ret, k: 0},
	})
	if err != nil {
		panic(err) // the program is fixed: a test assembles it
	}
	return p
}
