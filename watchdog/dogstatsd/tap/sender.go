package tap

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// senders names the process that sent each datagram over loopback, from
// the kernel itself: an eBPF socket filter on the packet socket sees the
// outgoing copy of every datagram to the port (dev_queue_xmit_nit, which
// for the loopback device, without a queue, runs in the sending task)
// and records that task's process id with the datagram's source
// address, port, IPv4 id and length, in a ring buffer the tap reads in
// place (sendRing); the received copy — the one the tap reads — is
// looked up in what was read from it. Whoever holds the socket, for
// however short a time (a socket per datagram), and whichever of the
// processes sharing it (a prefork server's workers) sent it, the
// datagram is its sender's.
//
// Kernels whose socket filters may not call bpf_get_current_pid_tgid
// (before Linux 6.10) refuse the program: the tap then names senders by
// their sockets alone (owners).
type senders struct {
	mapFD, progFD int
	ring          *sendRing // read by the tap's Run only; unmapped after it
}

// Field offsets of struct __sk_buff (linux/bpf.h) a socket filter reads.
const (
	skbPktType  = 4
	skbProtocol = 16
	skbIfindex  = 40
)

// senderKey is the map's key: family|length<<16, port|ipid<<16, address
// (four words, as BPF_LD_ABS loads them: in host order).
type senderKey [6]uint32

// senderValue is the sending process, the first half of what the filter
// writes (the key follows).
type senderValue struct {
	TGID uint32
	_    uint32
}

// openSenders loads the filter for datagrams to port whose outgoing copy
// leaves by loopback interface lo.
func openSenders(port uint16, lo int) (*senders, error) {
	mapFD, err := bpfMapCreate(unix.BPF_MAP_TYPE_RINGBUF, 0, 0, sendRingBytes)
	if err != nil {
		return nil, fmt.Errorf("bpf ring buffer: %w", err)
	}
	ring, err := mapSendRing(mapFD)
	if err != nil {
		unix.Close(mapFD)
		return nil, err
	}
	insns := senderProgram(port, lo, mapFD)
	progFD, log, err := bpfProgLoad(insns)
	if err != nil {
		ring.unmap()
		unix.Close(mapFD)
		return nil, fmt.Errorf("bpf program: %w (%s)", err, log)
	}
	return &senders{mapFD: mapFD, progFD: progFD, ring: ring}, nil
}

// close closes the program and the map; their ring stays mapped until
// unmap (a Run may be reading it).
func (s *senders) close() {
	unix.Close(s.progFD)
	unix.Close(s.mapFD)
}

func (s *senders) unmap() { s.ring.unmap() }

// attach puts the filter on packet socket fd.
func (s *senders) attach(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_BPF, s.progFD)
}

// lookup returns the process that sent the datagram of packet pkt (its
// network-layer bytes), 0 when the filter did not see it leave. The
// filter wrote its record before the datagram was received: reading the
// ring first finds it.
func (s *senders) lookup(pkt []byte, proto uint16) int {
	k, ok := keyOf(pkt, proto)
	if !ok {
		return 0
	}
	s.ring.collect()
	return int(s.ring.sender(k))
}

// collect reads the ring, so that the records of datagrams no one looks
// up do not fill it.
func (s *senders) collect() { s.ring.collect() }

// keyOf builds the key the filter recorded the packet's outgoing copy
// under.
func keyOf(b []byte, proto uint16) (senderKey, bool) {
	var k senderKey
	be := binary.BigEndian
	switch proto {
	case protoIPv4:
		if len(b) < 20 {
			return k, false
		}
		ihl := int(b[0]&0x0f) * 4
		if len(b) < ihl+8 {
			return k, false
		}
		udp := b[ihl:]
		k[0] = 4 | uint32(be.Uint16(udp[4:]))<<16
		k[1] = uint32(be.Uint16(udp[0:])) | uint32(be.Uint16(b[4:]))<<16
		k[2] = be.Uint32(b[12:])
	case protoIPv6:
		if len(b) < 48 {
			return k, false
		}
		udp := b[40:]
		k[0] = 6 | uint32(be.Uint16(udp[4:]))<<16
		k[1] = uint32(be.Uint16(udp[0:]))
		for i := range 4 {
			k[2+i] = be.Uint32(b[8+4*i:])
		}
	default:
		return k, false
	}
	return k, true
}

// eBPF instructions (linux/bpf.h, bpf_common.h).
type bpfInsn struct {
	code    uint8
	regs    uint8 // dst | src<<4
	off     int16
	imm     int32
	label   string // a jump's target
	at      string // this instruction's label
	mapLoad bool   // the first half of a ld_imm64 of a map's fd
}

const (
	bpfALU64 = 0x07
	bpfJMP   = 0x05
	bpfLD    = 0x00
	bpfLDX   = 0x01
	bpfSTX   = 0x03
	bpfST    = 0x02

	bpfW   = 0x00
	bpfH   = 0x08
	bpfB   = 0x10
	bpfDW  = 0x18
	bpfABS = 0x20
	bpfIND = 0x40
	bpfMEM = 0x60
	bpfIMM = 0x00

	bpfK = 0x00
	bpfX = 0x08

	bpfMOV  = 0xb0
	bpfAND  = 0x50
	bpfLSH  = 0x60
	bpfRSH  = 0x70
	bpfOR   = 0x40
	bpfADD  = 0x00
	bpfJEQ  = 0x10
	bpfJNE  = 0x50
	bpfJSET = 0x40
	bpfJA   = 0x00
	bpfCALL = 0x80
	bpfEXIT = 0x90

	fnGetCurrentPidTgid = 14
	fnRingbufOutput     = 130

	r0, r1, r2, r3, r4, r6, r7, r8, r9, r10 = 0, 1, 2, 3, 4, 6, 7, 8, 9, 10
)

func movK(dst uint8, imm int32) bpfInsn {
	return bpfInsn{code: bpfALU64 | bpfMOV | bpfK, regs: dst, imm: imm}
}
func movX(dst, src uint8) bpfInsn { return bpfInsn{code: bpfALU64 | bpfMOV | bpfX, regs: dst | src<<4} }
func alu(op, dst uint8, imm int32) bpfInsn {
	return bpfInsn{code: bpfALU64 | op | bpfK, regs: dst, imm: imm}
}
func aluX(op, dst, src uint8) bpfInsn { return bpfInsn{code: bpfALU64 | op | bpfX, regs: dst | src<<4} }
func ldxW(dst, src uint8, off int16) bpfInsn {
	return bpfInsn{code: bpfLDX | bpfMEM | bpfW, regs: dst | src<<4, off: off}
}
func stxW(dst, src uint8, off int16) bpfInsn {
	return bpfInsn{code: bpfSTX | bpfMEM | bpfW, regs: dst | src<<4, off: off}
}
func stW(dst uint8, off int16, imm int32) bpfInsn {
	return bpfInsn{code: bpfST | bpfMEM | bpfW, regs: dst, off: off, imm: imm}
}
func ldAbs(size uint8, off int32) bpfInsn { return bpfInsn{code: bpfLD | bpfABS | size, imm: off} }
func ldInd(size, src uint8, off int32) bpfInsn {
	return bpfInsn{code: bpfLD | bpfIND | size, regs: src << 4, imm: off}
}
func jmpK(op, dst uint8, imm int32, label string) bpfInsn {
	return bpfInsn{code: bpfJMP | op | bpfK, regs: dst, imm: imm, label: label}
}
func ja(label string) bpfInsn        { return bpfInsn{code: bpfJMP | bpfJA, label: label} }
func call(fn int32) bpfInsn          { return bpfInsn{code: bpfJMP | bpfCALL, imm: fn} }
func exit() bpfInsn                  { return bpfInsn{code: bpfJMP | bpfEXIT} }
func at(l string, i bpfInsn) bpfInsn { i.at = l; return i }

// senderProgram is the filter: the outgoing copy of a UDP datagram to
// port on interface lo is recorded (its sender, then the key, written
// to the ring buffer) and dropped; a received
// one is kept as the classic filter keeps it; anything else is dropped.
func senderProgram(port uint16, lo, mapFD int) []bpfInsn {
	p := int32(port)
	prog := []bpfInsn{
		movX(r6, r1),
		ldxW(r0, r6, skbProtocol),
		movX(r7, r0), // the protocol, in network order as a host word
		ldxW(r0, r6, skbPktType),
		jmpK(bpfJNE, r0, unix.PACKET_OUTGOING, "rx"),
		ldxW(r0, r6, skbIfindex),
		jmpK(bpfJNE, r0, int32(lo), "drop"),
		jmpK(bpfJEQ, r7, int32(htons(protoIPv6)), "v6"),
		jmpK(bpfJNE, r7, int32(htons(protoIPv4)), "drop"),
		// IPv4: UDP, a first fragment, to port.
		ldAbs(bpfB, 9),
		jmpK(bpfJNE, r0, 17, "drop"),
		ldAbs(bpfH, 6),
		jmpK(bpfJSET, r0, 0x1fff, "drop"),
		ldAbs(bpfB, 0),
		alu(bpfAND, r0, 0x0f),
		alu(bpfLSH, r0, 2),
		movX(r7, r0), // the header's length
		ldInd(bpfH, r7, 2),
		jmpK(bpfJNE, r0, p, "drop"),
		ldInd(bpfH, r7, 4), // length
		alu(bpfLSH, r0, 16),
		alu(bpfOR, r0, 4),
		stxW(r10, r0, -24),
		ldAbs(bpfH, 4), // id
		alu(bpfLSH, r0, 16),
		movX(r8, r0),
		ldInd(bpfH, r7, 0), // source port
		aluX(bpfOR, r0, r8),
		stxW(r10, r0, -20),
		ldAbs(bpfW, 12),
		stxW(r10, r0, -16),
		stW(r10, -12, 0),
		stW(r10, -8, 0),
		stW(r10, -4, 0),
		ja("record"),
		// IPv6 without extension headers: UDP to port.
		at("v6", ldAbs(bpfB, 6)),
		jmpK(bpfJNE, r0, 17, "drop"),
		ldAbs(bpfH, 42),
		jmpK(bpfJNE, r0, p, "drop"),
		ldAbs(bpfH, 44),
		alu(bpfLSH, r0, 16),
		alu(bpfOR, r0, 6),
		stxW(r10, r0, -24),
		ldAbs(bpfH, 40),
		stxW(r10, r0, -20),
		ldAbs(bpfW, 8),
		stxW(r10, r0, -16),
		ldAbs(bpfW, 12),
		stxW(r10, r0, -12),
		ldAbs(bpfW, 16),
		stxW(r10, r0, -8),
		ldAbs(bpfW, 20),
		stxW(r10, r0, -4),
		// The sender: the task sending, this very moment.
		at("record", call(fnGetCurrentPidTgid)),
		alu(bpfRSH, r0, 32),
		stxW(r10, r0, -32),
		stW(r10, -28, 0),
		{code: bpfLD | bpfDW | bpfIMM, regs: r1 | unix.BPF_PSEUDO_MAP_FD<<4, imm: int32(mapFD), mapLoad: true},
		{}, // ld_imm64's second half
		movX(r2, r10),
		alu(bpfADD, r2, -32),
		movK(r3, int32(sendRecordBytes)),
		movK(r4, unix.BPF_RB_NO_WAKEUP),
		call(fnRingbufOutput),
		ja("drop"),
		// A received datagram: what the classic filter keeps.
		at("rx", jmpK(bpfJEQ, r7, int32(htons(protoIPv6)), "rx6")),
		jmpK(bpfJNE, r7, int32(htons(protoIPv4)), "drop"),
		ldAbs(bpfB, 9),
		jmpK(bpfJNE, r0, 17, "drop"),
		ldAbs(bpfH, 6),
		jmpK(bpfJSET, r0, 0x1fff, "drop"),
		ldAbs(bpfB, 0),
		alu(bpfAND, r0, 0x0f),
		alu(bpfLSH, r0, 2),
		movX(r7, r0),
		ldInd(bpfH, r7, 2),
		jmpK(bpfJEQ, r0, p, "keep"),
		ja("drop"),
		at("rx6", ldAbs(bpfB, 6)),
		jmpK(bpfJNE, r0, 17, "drop"),
		ldAbs(bpfH, 42),
		jmpK(bpfJEQ, r0, p, "keep"),
		at("drop", movK(r0, 0)),
		exit(),
		at("keep", movK(r0, snapLen)),
		exit(),
	}
	return prog
}

// encode resolves the labels and lays the program out as the kernel
// reads it.
func encode(prog []bpfInsn) ([]byte, error) {
	idx := map[string]int{}
	for i, in := range prog {
		if in.at != "" {
			idx[in.at] = i
		}
	}
	out := make([]byte, 8*len(prog))
	for i, in := range prog {
		off := in.off
		if in.label != "" {
			j, ok := idx[in.label]
			if !ok || j <= i {
				return nil, fmt.Errorf("bpf: bad jump from %d to %q", i, in.label)
			}
			off = int16(j - i - 1)
		}
		b := out[8*i:]
		b[0], b[1] = in.code, in.regs
		binary.NativeEndian.PutUint16(b[2:], uint16(off))
		binary.NativeEndian.PutUint32(b[4:], uint32(in.imm))
	}
	return out, nil
}

func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func bpfMapCreate(typ, keySize, valueSize, maxEntries int) (int, error) {
	var attr [64]byte
	le := binary.NativeEndian
	le.PutUint32(attr[0:], uint32(typ))
	le.PutUint32(attr[4:], uint32(keySize))
	le.PutUint32(attr[8:], uint32(valueSize))
	le.PutUint32(attr[12:], uint32(maxEntries))
	fd, err := bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&attr[0]), unsafe.Sizeof(attr))
	if err == nil {
		unix.CloseOnExec(fd)
	}
	return fd, err
}

func bpfProgLoad(prog []bpfInsn) (int, string, error) {
	insns, err := encode(prog)
	if err != nil {
		return -1, "", err
	}
	license := []byte("GPL\x00")
	logBuf := make([]byte, 16<<10)
	var attr [128]byte
	le := binary.NativeEndian
	le.PutUint32(attr[0:], unix.BPF_PROG_TYPE_SOCKET_FILTER)
	le.PutUint32(attr[4:], uint32(len(prog)))
	le.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&insns[0]))))
	le.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	le.PutUint32(attr[24:], 1) // log level
	le.PutUint32(attr[28:], uint32(len(logBuf)))
	le.PutUint64(attr[32:], uint64(uintptr(unsafe.Pointer(&logBuf[0]))))
	fd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr[0]), unsafe.Sizeof(attr))
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	if err != nil {
		n := 0
		for n < len(logBuf) && logBuf[n] != 0 {
			n++
		}
		return -1, lastLines(string(logBuf[:n]), 3), err
	}
	unix.CloseOnExec(fd)
	return fd, "", nil
}

func lastLines(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' && i < len(s)-1 {
			if lines++; lines == n {
				return s[i+1:]
			}
		}
	}
	return s
}
