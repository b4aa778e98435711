package dogstatsd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// The proxy's datagrams move in batches: recvmmsg(2) fills a batch, the
// scanner reads it in place, sendmmsg(2) forwards it from the same memory.
// Nothing is allocated or copied per datagram, and one system call moves
// up to batchLen of them each way.
const (
	batchLen = 64
	// batches is how many the forwarder may hold while the agent is slow;
	// past that the receiver goes on reading (beats must not wait for the
	// agent) and counts what it cannot forward as dropped.
	batches = 4
)

// ovflSpace is the control buffer one datagram's SO_RXQ_OVFL count needs.
var ovflSpace = unix.CmsgSpace(4)

// batch is up to batchLen datagrams and the headers that read and write
// them. A batch belongs to the receiver or to the forwarder, never both.
type batch struct {
	data []byte // batchLen slots of maxDatagram bytes, one allocation
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	ctrl []byte // batchLen control buffers of ovflSpace bytes
	n    int    // datagrams held
}

func newBatch() *batch {
	b := &batch{
		data: make([]byte, batchLen*maxDatagram),
		hdrs: make([]unix.Mmsghdr, batchLen),
		iovs: make([]unix.Iovec, batchLen),
		ctrl: make([]byte, batchLen*ovflSpace),
	}
	for i := range b.hdrs {
		b.iovs[i].Base = &b.data[i*maxDatagram]
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.Iovlen = 1
	}
	return b
}

// datagram returns datagram i, received or to send.
func (b *batch) datagram(i int) []byte {
	return b.data[i*maxDatagram : i*maxDatagram+int(b.hdrs[i].Len)]
}

// truncated reports whether datagram i was longer than its slot.
func (b *batch) truncated(i int) bool { return b.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 }

// armForRecv resets every header to receive a whole slot and its drop
// count.
func (b *batch) armForRecv() {
	for i := range b.hdrs {
		b.iovs[i].SetLen(maxDatagram)
		h := &b.hdrs[i].Hdr
		h.Control = &b.ctrl[i*ovflSpace]
		h.SetControllen(ovflSpace)
		h.Flags = 0
		b.hdrs[i].Len = 0
	}
	b.n = 0
}

// armForSend points the headers at the received datagrams' lengths, with
// no address (the forwarding socket is connected) and no control data.
func (b *batch) armForSend() {
	for i := 0; i < b.n; i++ {
		b.iovs[i].SetLen(int(b.hdrs[i].Len))
		h := &b.hdrs[i].Hdr
		h.Control = nil
		h.SetControllen(0)
	}
}

// kernelDrops returns the largest SO_RXQ_OVFL count in the batch: the
// datagrams the kernel had dropped at the socket, since it was opened,
// when the latest of these was queued (the kernel adds the count only
// once it is not zero).
func (b *batch) kernelDrops() (drops uint32, ok bool) {
	for i := 0; i < b.n; i++ {
		c := b.ctrl[i*ovflSpace : i*ovflSpace+int(b.hdrs[i].Hdr.Controllen)]
		if d, found := parseOvfl(c); found && d >= drops {
			drops, ok = d, true
		}
	}
	return drops, ok
}

// parseOvfl finds the SO_RXQ_OVFL message in control data, without the
// allocations of unix.ParseSocketControlMessage.
func parseOvfl(c []byte) (uint32, bool) {
	for len(c) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		if h.Len < unix.SizeofCmsghdr || uint64(h.Len) > uint64(len(c)) {
			return 0, false
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && int(h.Len) >= unix.CmsgLen(4) {
			return binary.NativeEndian.Uint32(c[unix.CmsgLen(0):]), true
		}
		next := unix.CmsgSpace(int(h.Len) - unix.CmsgLen(0))
		if next > len(c) {
			return 0, false
		}
		c = c[next:]
	}
	return 0, false
}

// recvBatch reads what is queued on the socket into b, up to batchLen
// datagrams, waiting (in the runtime's poller) while nothing is.
func recvBatch(rc syscall.RawConn, b *batch) error {
	b.armForRecv()
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)),
			unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		errno = e
		if e == 0 {
			b.n = int(n)
		}
		return true
	})
	runtime.KeepAlive(b)
	if err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// sendBatch writes datagrams [from, to) of b on a connected socket and
// returns how many went out before err; the caller skips the datagram err
// is about (a refused send) and calls again. Waiting for room in the
// socket's buffer ends at the connection's write deadline.
func sendBatch(rc syscall.RawConn, b *batch, from, to int) (sent int, err error) {
	var errno syscall.Errno
	werr := rc.Write(func(fd uintptr) bool {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[from])), uintptr(to-from),
			unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		errno = e
		if e == 0 {
			sent = int(n)
		}
		return true
	})
	runtime.KeepAlive(b)
	if werr != nil {
		return 0, werr
	}
	if errno != 0 {
		return 0, errno
	}
	return sent, nil
}

// socketDrops reads the count of datagrams the kernel dropped at the
// socket (SO_MEMINFO's drops): it catches those after the last datagram
// read, which no SO_RXQ_OVFL reports yet.
func socketDrops(rc syscall.RawConn) (uint32, bool) {
	var mem [unix.SK_MEMINFO_VARS]uint32
	ok := false
	rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mem))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
		ok = e == 0 && l > unix.SK_MEMINFO_DROPS*4
	})
	return mem[unix.SK_MEMINFO_DROPS], ok
}

// rcvbufWanted is the receive buffer the proxy asks for: at the client's
// 1,432-byte datagrams about 7,000 of them, tens of milliseconds of a
// burst while the proxy is not scheduled.
const rcvbufWanted = 16 << 20

// rcvbuf is what sizing the socket's receive buffer obtained.
type rcvbuf struct {
	wanted, got int  // bytes; got is the kernel's figure, which counts its overhead (twice what is set)
	forced      bool // SO_RCVBUFFORCE (CAP_NET_ADMIN) went past net.core.rmem_max
	max         int  // net.core.rmem_max, when readable
}

// sizeRcvbuf asks for rcvbufWanted bytes of receive buffer: past
// net.core.rmem_max when permitted (SO_RCVBUFFORCE, as root), else up to
// it (SO_RCVBUF), and reads back what the kernel granted.
func sizeRcvbuf(rc syscall.RawConn) (rcvbuf, error) {
	r := rcvbuf{wanted: rcvbufWanted, max: -1}
	if b, err := procfs.Sysctl("net.core.rmem_max"); err == nil {
		r.max = b
	}
	var err error
	cerr := rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, r.wanted) == nil {
			r.forced = true
		} else if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, r.wanted); e != nil {
			err = e
		}
		r.got, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		// Drop counts come with each datagram from here on.
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	})
	return r, errors.Join(cerr, err)
}

// short reports whether the kernel granted less than asked (it reports
// twice what was set, its bookkeeping included).
func (r rcvbuf) short() bool { return r.got < r.wanted }

func (r rcvbuf) String() string {
	if r.short() {
		return fmt.Sprintf("%d KiB of the %d KiB asked (net.core.rmem_max %d)", r.got>>10, r.wanted>>10, r.max)
	}
	return fmt.Sprintf("%d KiB", r.got>>10)
}
