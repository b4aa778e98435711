package fdtarget

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"golang.org/x/sys/unix"
)

// UnixDiag is what sock_diag says of one UNIX socket (linux/unix_diag.h):
// what /proc/net/unix has, and the peer's inode and the queues.
type UnixDiag struct {
	Inode uint64
	Type  int // SOCK_STREAM 1, SOCK_DGRAM 2, SOCK_SEQPACKET 5
	// State is a TCP state number: TCP_ESTABLISHED (connected),
	// TCP_LISTEN, TCP_CLOSE (unconnected), TCP_SYN_SENT (connecting).
	State uint8
	// Name is the bound name ("@…" abstract), "" when unbound.
	Name string
	// Peer is the inode of the socket at the other end (0: none).
	Peer uint64
	// RecvQ and SendQ: for a listening socket the connections waiting
	// to be accepted and the backlog; otherwise the bytes queued to be
	// read and the bytes written and not yet read by the peer.
	RecvQ, SendQ uint32
	HasQueues    bool
}

// linux/unix_diag.h.
const (
	udiagShowName  = 0x01
	udiagShowPeer  = 0x04
	udiagShowRqlen = 0x10

	unixDiagName  = 0
	unixDiagPeer  = 2
	unixDiagRqlen = 4

	diagNoCookie = ^uint32(0)

	unixDiagReqLen = 24 // struct unix_diag_req
	unixDiagMsgLen = 16 // struct unix_diag_msg
)

// diagConn is a NETLINK_SOCK_DIAG socket made in a network namespace:
// its requests see that namespace's sockets.
type diagConn struct {
	fd  int
	seq uint32
	buf []byte
}

// dialDiag makes a sock_diag socket in pid's network namespace: here
// when it is ours, else from an OS thread that enters it for the
// socket(2) call alone and comes back (a socket stays in the namespace it
// was made in). Entering needs CAP_SYS_ADMIN.
func dialDiag(pid int) (*diagConn, error) {
	mk := func() (int, error) {
		return unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	}
	same, err := sameNetns(pid)
	if err != nil {
		return nil, err
	}
	var fd int
	if same {
		fd, err = mk()
	} else {
		fd, err = inNetns(pid, mk)
	}
	if err != nil {
		return nil, fmt.Errorf("sock_diag socket in the network namespace of pid %d: %w", pid, err)
	}
	tv := unix.Timeval{Sec: 1}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &diagConn{fd: fd, buf: make([]byte, 16<<10)}, nil
}

func (c *diagConn) Close() error { return unix.Close(c.fd) }

// sameNetns reports whether pid shares our network namespace.
func sameNetns(pid int) (bool, error) {
	var ours, theirs unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &ours); err != nil {
		return false, err
	}
	p := procfs.PidPath(pid, "ns", "net")
	if err := unix.Stat(p, &theirs); err != nil {
		return false, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	return ours.Ino == theirs.Ino && ours.Dev == theirs.Dev, nil
}

// inNetns runs f on an OS thread moved into pid's network namespace,
// then moves the thread back. A thread that cannot come back is not
// handed back to the Go scheduler: it stays locked and exits with its
// goroutine.
func inNetns(pid int, f func() (int, error)) (int, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, err}
			return
		}
		defer unix.Close(own)
		p := procfs.PidPath(pid, "ns", "net")
		target, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, &os.PathError{Op: "open", Path: p, Err: err}}
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("setns: %w", err)}
			return
		}
		fd, ferr := f()
		if err := unix.Setns(own, unix.CLONE_NEWNET); err != nil {
			// Still in the target's namespace: this thread must die.
			if fd >= 0 {
				unix.Close(fd)
			}
			done <- result{-1, fmt.Errorf("setns back: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{fd, ferr}
	}()
	r := <-done
	return r.fd, r.err
}

// errNoSocket is a sock_diag answer that the inode is no socket of the
// namespace.
var errNoSocket = errors.New("no such socket in the network namespace")

// unix asks for the UNIX socket with inode ino.
func (c *diagConn) unix(ino uint64) (UnixDiag, error) {
	if ino > 0xffffffff {
		return UnixDiag{}, errNoSocket // udiag_ino is 32 bits
	}
	c.seq++
	req := make([]byte, unix.SizeofNlMsghdr+unixDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], c.seq)
	r := req[unix.SizeofNlMsghdr:]
	r[0] = unix.AF_UNIX
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	ne.PutUint32(r[8:], uint32(ino))
	ne.PutUint32(r[12:], udiagShowName|udiagShowPeer|udiagShowRqlen)
	ne.PutUint32(r[16:], diagNoCookie)
	ne.PutUint32(r[20:], diagNoCookie)
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return UnixDiag{}, fmt.Errorf("sock_diag request: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return UnixDiag{}, fmt.Errorf("sock_diag answer: %w", err)
		}
		d, done, err := parseDiagAnswer(c.buf[:n], c.seq)
		if done || err != nil {
			return d, err
		}
	}
}

// parseDiagAnswer reads netlink messages answering request seq: the
// socket, or the error; done is false when the datagram held only
// messages of another request.
func parseDiagAnswer(b []byte, seq uint32) (d UnixDiag, done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(ne.Uint32(b[0:]))
		typ := ne.Uint16(b[4:])
		s := ne.Uint32(b[8:])
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return UnixDiag{}, true, errors.New("sock_diag: a malformed message")
		}
		body := b[unix.SizeofNlMsghdr:l]
		b = b[min(nlAlign(l), len(b)):]
		if s != seq {
			continue
		}
		switch typ {
		case unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if e := -int32(ne.Uint32(body)); e == int32(unix.ENOENT) {
					return UnixDiag{}, true, errNoSocket
				} else if e != 0 {
					return UnixDiag{}, true, fmt.Errorf("sock_diag: %w", syscall.Errno(e))
				}
			}
			return UnixDiag{}, true, errNoSocket
		case unix.SOCK_DIAG_BY_FAMILY:
			d, err := parseUnixDiagMsg(body)
			return d, true, err
		}
	}
	return UnixDiag{}, false, nil
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// parseUnixDiagMsg reads a struct unix_diag_msg and its attributes.
func parseUnixDiagMsg(b []byte) (UnixDiag, error) {
	if len(b) < unixDiagMsgLen || b[0] != unix.AF_UNIX {
		return UnixDiag{}, errors.New("sock_diag: not a UNIX socket's answer")
	}
	ne := binary.NativeEndian
	d := UnixDiag{Type: int(b[1]), State: b[2], Inode: uint64(ne.Uint32(b[4:]))}
	for a := b[unixDiagMsgLen:]; len(a) >= 4; {
		l := int(ne.Uint16(a[0:]))
		typ := ne.Uint16(a[2:]) & 0x3fff
		if l < 4 || l > len(a) {
			break
		}
		v := a[4:l]
		switch typ {
		case unixDiagName:
			d.Name = sunPath(v)
		case unixDiagPeer:
			if len(v) >= 4 {
				d.Peer = uint64(ne.Uint32(v))
			}
		case unixDiagRqlen:
			if len(v) >= 8 {
				d.RecvQ, d.SendQ, d.HasQueues = ne.Uint32(v), ne.Uint32(v[4:]), true
			}
		}
		a = a[min(nlAlign(l), len(a)):]
	}
	return d, nil
}

// sunPath turns a sun_path as the kernel keeps it into the form
// /proc/net/unix prints: an abstract name's leading NUL (and any other)
// as '@'.
func sunPath(v []byte) string {
	out := make([]byte, len(v))
	for i, c := range v {
		if c == 0 {
			c = '@'
		}
		out[i] = c
	}
	// A path name ends at its NUL terminator, which the kernel may send.
	if len(out) > 1 && out[0] != '@' && out[len(out)-1] == '@' {
		out = out[:len(out)-1]
	}
	return string(out)
}
