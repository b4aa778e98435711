package procwatch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The process connector's protocol (linux/connector.h, linux/cn_proc.h):
// a netlink message holds a cn_msg, which holds a proc_event.
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procEventExec     = 0x00000002
	procEventExit     = 0x80000000

	nlmsgHdrLen = 16
	cnMsgLen    = 20
)

// Connector receives the kernel's announcement of each exec and exit.
type Connector struct {
	f *os.File
}

// Listen subscribes to the process connector. It needs CAP_NET_ADMIN and
// the host's network and pid namespaces; without them the error says so
// and a caller scans /proc instead.
func Listen() (*Connector, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("process connector: socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("process connector: bind: %w", err)
	}
	// A large buffer rides out a fork storm; an overrun is reported as
	// ENOBUFS, and the caller scans.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	msg := make([]byte, nlmsgHdrLen+cnMsgLen+4)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	binary.NativeEndian.PutUint32(msg[12:], uint32(os.Getpid()))
	cn := msg[nlmsgHdrLen:]
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint16(cn[16:], 4)
	binary.NativeEndian.PutUint32(cn[cnMsgLen:], procCnMcastListen)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("process connector: subscribe: %w", err)
	}
	return &Connector{f: os.NewFile(uintptr(fd), "netlink-proc-connector")}, nil
}

// Close ends the subscription; Run returns.
func (c *Connector) Close() error { return c.f.Close() }

// Event is one process event.
type Event struct {
	PID  int  // the process (thread group) id
	Exit bool // it exited; else it executed a new program
}

// ErrOverrun reports that events were lost (the socket's buffer filled):
// the caller should scan /proc.
var ErrOverrun = errors.New("process connector: events were lost (ENOBUFS)")

// Run reads events until ctx is done or the connector is closed, calling
// fn for each exec and each process (not thread) exit. An overrun is
// passed to lost, and reading goes on.
func (c *Connector) Run(ctx context.Context, fn func(Event), lost func()) error {
	stop := context.AfterFunc(ctx, func() { c.f.Close() })
	defer stop()
	rc, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case rerr == unix.ENOBUFS:
			lost()
			continue
		case rerr != nil:
			return fmt.Errorf("process connector: %w", rerr)
		}
		for _, ev := range ParseEvents(buf[:n]) {
			fn(ev)
		}
	}
}

// ParseEvents reads the exec and exit events of a datagram from the
// process connector; anything else, or anything malformed, is skipped.
func ParseEvents(b []byte) []Event {
	var evs []Event
	for len(b) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			break
		}
		msg := b[nlmsgHdrLen:l]
		b = b[min(nlmAlign(l), len(b)):]
		if len(msg) < cnMsgLen+16 {
			continue
		}
		if binary.NativeEndian.Uint32(msg[0:]) != cnIdxProc || binary.NativeEndian.Uint32(msg[4:]) != cnValProc {
			continue
		}
		dataLen := int(binary.NativeEndian.Uint16(msg[16:]))
		ev := msg[cnMsgLen:]
		if dataLen < len(ev) {
			ev = ev[:dataLen]
		}
		// proc_event: what u32, cpu u32, timestamp u64, then the union.
		if len(ev) < 16+8 {
			continue
		}
		what := binary.NativeEndian.Uint32(ev[0:])
		data := ev[16:]
		pid := int(int32(binary.NativeEndian.Uint32(data[0:])))
		tgid := int(int32(binary.NativeEndian.Uint32(data[4:])))
		switch {
		case what == procEventExec && tgid > 0:
			evs = append(evs, Event{PID: tgid})
		case what == procEventExit && pid == tgid && tgid > 0:
			evs = append(evs, Event{PID: tgid, Exit: true})
		}
	}
	return evs
}

func nlmAlign(n int) int { return (n + 3) &^ 3 }
