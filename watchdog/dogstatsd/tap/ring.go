package tap

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tap reads its packets from a TPACKET_V3 receive ring (packet_mmap):
// the kernel writes each packet the filter passes into a block of memory
// shared with stallwatch, and hands a block over when it is full or when
// ringRetire has passed since its first packet. One wake-up then reads
// every datagram of a block in place, with no system call: a host's
// DogStatsD traffic costs a few wake-ups a second, not one per datagram.
// A beat is therefore seen at most ringRetire after its datagram was sent.
const (
	// ringBlockSize keeps the largest datagram (64 KiB) whole: the kernel
	// cuts a packet to what a block can hold.
	ringBlockSize = 128 << 10
	ringBlocks    = 32 // 4 MiB, room for ~25,000 small datagrams
	// ringFrameSize is only checked by the kernel for TPACKET_V3, where
	// packets are packed in blocks.
	ringFrameSize = 2048
	// ringRetire is how long, in ms, a block that has packets waits to
	// be handed over.
	ringRetire = 100
)

// Offsets in struct tpacket_block_desc (its tpacket_hdr_v1) and struct
// tpacket3_hdr, linux/if_packet.h.
const (
	blockStatus     = 8
	blockNumPkts    = 12
	blockFirstPkt   = 16
	pktNextOffset   = 0
	pktSnaplen      = 12
	pktNet          = 26
	sockaddrLLAt    = 48 // TPACKET_ALIGN(sizeof(struct tpacket3_hdr))
	llProtocol      = 2  // in struct sockaddr_ll, network order
	llIfindex       = 4  // in struct sockaddr_ll
	llPkttype       = 10 // in struct sockaddr_ll
	sockaddrLLBytes = 12
)

// ring is a mapped TPACKET_V3 receive ring.
type ring struct {
	mem  []byte
	next int // the block to read next
}

// setupRing gives packet socket fd a receive ring; it must come before
// bind, so that no packet is queued elsewhere.
func setupRing(fd int) (*ring, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, fmt.Errorf("PACKET_VERSION TPACKET_V3: %w", err)
	}
	req := unix.TpacketReq3{
		Block_size: ringBlockSize, Block_nr: ringBlocks,
		Frame_size: ringFrameSize, Frame_nr: ringBlockSize / ringFrameSize * ringBlocks,
		Retire_blk_tov: ringRetire,
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, fmt.Errorf("PACKET_RX_RING (%d blocks of %d KiB): %w", ringBlocks, ringBlockSize>>10, err)
	}
	mem, err := unix.Mmap(fd, 0, ringBlockSize*ringBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the packet ring: %w", err)
	}
	return &ring{mem: mem}, nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

// status is the word the kernel and the reader hand a block over with.
func (r *ring) status(block int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[block*ringBlockSize+blockStatus]))
}

// drain reads every block the kernel has handed over, in order, calls fn
// with each packet's network-layer bytes, protocol, packet type and the
// interface it arrived on, and gives the blocks back. It reports whether it read any.
func (r *ring) drain(fn func(pkt []byte, proto uint16, pkttype uint8, ifindex int)) bool {
	read := false
	for {
		st := r.status(r.next)
		if atomic.LoadUint32(st)&unix.TP_STATUS_USER == 0 {
			return read
		}
		r.readBlock(r.mem[r.next*ringBlockSize:(r.next+1)*ringBlockSize], fn)
		atomic.StoreUint32(st, unix.TP_STATUS_KERNEL)
		r.next = (r.next + 1) % ringBlocks
		read = true
	}
}

// readBlock walks one block's packets. The kernel wrote it, but every
// offset is still checked against the block.
func (r *ring) readBlock(b []byte, fn func(pkt []byte, proto uint16, pkttype uint8, ifindex int)) {
	le := binary.NativeEndian
	n := le.Uint32(b[blockNumPkts:])
	off := int(le.Uint32(b[blockFirstPkt:]))
	for range n {
		if off <= 0 || off+sockaddrLLAt+sockaddrLLBytes > len(b) {
			return
		}
		h := b[off:]
		next := int(le.Uint32(h[pktNextOffset:]))
		snap := int(le.Uint32(h[pktSnaplen:]))
		net := int(le.Uint16(h[pktNet:]))
		ll := h[sockaddrLLAt:]
		proto := binary.BigEndian.Uint16(ll[llProtocol:])
		if net >= sockaddrLLAt+sockaddrLLBytes && net+snap <= len(h) {
			fn(h[net:net+snap], proto, ll[llPkttype], int(int32(le.Uint32(ll[llIfindex:]))))
		}
		if next == 0 {
			return
		}
		off += next
	}
}
