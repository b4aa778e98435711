package procwatch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
)

// The process connector's protocol (linux/connector.h, linux/cn_proc.h):
// a netlink message holds a cn_msg, which holds a proc_event.
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procEventFork     = 0x00000001
	procEventExec     = 0x00000002
	procEventExit     = 0x80000000

	nlmsgHdrLen = 16
	cnMsgLen    = 20
)

// Connector receives the kernel's announcement of each exec and exit.
//
// Its socket is in no epoll set while events come: the kernel wakes a
// reader in epoll_wait at every datagram that arrives after the last one
// was reported, so a paced reader (RunBatches) on a host that forks 50
// processes a second would still be woken 50 to 100 times a second, for
// nothing. Run waits for the first event through Go's poller on a
// duplicate of the socket, closed once it came (its epoll registration
// goes with it), and then reads at its pace without waiting. (Not by a
// blocking poll(2): the runtime's monitor thread wakes every 20 µs for
// the first 10 ms of each system call that blocks.)
type Connector struct {
	fd    int // the netlink socket; reads never wait (MSG_DONTWAIT)
	exits bool

	mu      sync.Mutex
	parents map[int]bool // whose forks are reported

	life            sync.Mutex
	closed, running bool
	waiting         *os.File // the duplicate Run waits on, while it does
}

// Listen subscribes to the process connector for execs and process exits.
// It needs CAP_NET_ADMIN and the host's network and pid namespaces;
// without them the error says so and a caller scans /proc instead.
func Listen() (*Connector, error) { return listen(true) }

// ListenExec is Listen for execs alone: the kernel drops every other
// event (forks, exits, threads starting and ending) before it reaches the
// socket, so a busy host's threads wake no one.
func ListenExec() (*Connector, error) { return listen(false) }

func listen(exits bool) (*Connector, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("process connector: socket: %w", err)
	}
	prog := eventFilter(exits)
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("process connector: attaching the event filter: %w", err)
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
	return &Connector{fd: fd, exits: exits}, nil
}

// Close ends the subscription; Run returns.
func (c *Connector) Close() error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.running {
		// Run closes the socket once it is done with it.
		if c.waiting != nil {
			c.waiting.Close()
		}
		return nil
	}
	return unix.Close(c.fd)
}

// Event is one process event.
type Event struct {
	PID  int  // the process (thread group) id
	Exit bool // it exited; else it executed a new program
	// Fork: PID is a new process (not a thread) forked by Parent, one of
	// the parents asked for (SetForkParents).
	Fork   bool
	Parent int
}

// maxForkParents is the most parents a filter names one by one (classic
// BPF jumps 255 instructions at most); past it, every process fork is
// let through (not threads), and Run keeps those of the parents asked
// for.
const maxForkParents = 200

// SetForkParents makes the connector report the processes that pids
// fork (a prefork server's workers, which execute nothing), besides
// execs: the kernel's filter is replaced by one that names them.
func (c *Connector) SetForkParents(pids []int) error {
	c.mu.Lock()
	c.parents = map[int]bool{}
	for _, p := range pids {
		c.parents[p] = true
	}
	c.mu.Unlock()
	prog := eventFilterWith(c.exits, pids)
	c.life.Lock()
	defer c.life.Unlock()
	if c.closed {
		return ErrClosed
	}
	return unix.SetsockoptSockFprog(c.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// ErrClosed is the error of a connector used after Close.
var ErrClosed = errors.New("process connector: closed")

// ErrOverrun reports that events were lost (the socket's buffer filled):
// the caller should scan /proc.
var ErrOverrun = errors.New("process connector: events were lost (ENOBUFS)")

// Run reads events until ctx is done or the connector is closed, calling
// fn for each exec and each process (not thread) exit. An overrun is
// passed to lost, and reading goes on. It returns ctx.Err() when ctx
// ended it, nil when Close did.
func (c *Connector) Run(ctx context.Context, fn func(Event), lost func()) error {
	return c.RunBatches(ctx, 0, func(evs []Event) {
		for _, ev := range evs {
			fn(ev)
		}
	}, lost)
}

// RunBatches is Run with the events that are waiting handed over
// together, and at most one wake-up every `every` while they come:
// events that come meanwhile wait in the socket's buffer (so none is
// later than every), and a host that starts 50 processes a second costs
// a reader that wakes 10 times a second (every = 100 ms), not 100 (its
// fork and its exec; each wake-up of an idle process costs more CPU than
// reading its events). The wake-ups fall on the multiples of every on
// CLOCK_MONOTONIC, where a daemon's other periodic work falls too (its
// watchdogs' deadlines, its progress readings): one wake-up of the
// process serves them all. When a read finds nothing, the next event is
// waited for (poll(2)): an idle host wakes no one. Reading allocates
// nothing. fn must not keep the slice. A connector runs once: it is
// closed when RunBatches returns.
func (c *Connector) RunBatches(ctx context.Context, every time.Duration, fn func([]Event), lost func()) error {
	c.life.Lock()
	if c.closed || c.running {
		c.life.Unlock()
		return ErrClosed
	}
	c.running = true
	c.life.Unlock()
	defer func() {
		c.life.Lock()
		c.closed, c.running = true, false
		unix.Close(c.fd)
		c.life.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	rb := newRecvBatch()
	var batch []Event
	var pace *time.Timer
	if every > 0 {
		pace = time.NewTimer(time.Hour)
		pace.Stop()
		defer pace.Stop()
	}
	for {
		if err := c.waitReadable(); err != nil {
			if c.isClosed() {
				return ctx.Err()
			}
			return fmt.Errorf("process connector: %w", err)
		}
		for {
			if c.isClosed() {
				return ctx.Err()
			}
			var overrun bool
			var err error
			batch, overrun, err = c.drain(rb, batch[:0])
			if err != nil {
				return fmt.Errorf("process connector: %w", err)
			}
			if overrun {
				lost()
			}
			if len(batch) > 0 {
				fn(batch)
			}
			if pace == nil || len(batch) == 0 && !overrun {
				break // wait for the next event
			}
			pace.Reset(monotime.UntilGrid(every))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-pace.C:
			}
		}
	}
}

func (c *Connector) isClosed() bool {
	c.life.Lock()
	defer c.life.Unlock()
	return c.closed
}

// waitReadable waits until an event is waiting or Close was called,
// through Go's poller on a duplicate of the socket, closed after.
func (c *Connector) waitReadable() error {
	c.life.Lock()
	if c.closed {
		c.life.Unlock()
		return ErrClosed
	}
	fd, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		// The flag is the open file's, the socket's too: its reads
		// never wait anyway.
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		c.life.Unlock()
		return err
	}
	f := os.NewFile(uintptr(fd), "netlink-proc-connector")
	c.waiting = f
	c.life.Unlock()
	defer func() {
		c.life.Lock()
		c.waiting = nil
		c.life.Unlock()
		f.Close()
	}()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(fd uintptr) bool { return readable(fd) })
}

// readable says whether a datagram is waiting on fd (ppoll, not
// waiting: a raw system call).
func readable(fd uintptr) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	var zero unix.Timespec
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		return errno != 0 || n > 0 // an error: let the read say what
	}
}

// drain reads every datagram waiting, appending the events a caller is
// told of to batch; overrun says the kernel dropped some (ENOBUFS).
func (c *Connector) drain(rb *recvBatch, batch []Event) (_ []Event, overrun bool, _ error) {
	for {
		n, err := rb.recv(uintptr(c.fd))
		switch err {
		case 0:
			for i := range n {
				batch = c.keep(batch, rb.datagram(i))
			}
			if n < recvBatchLen {
				return batch, overrun, nil
			}
		case unix.EINTR:
		case unix.ENOBUFS:
			overrun = true
		case unix.EAGAIN:
			return batch, overrun, nil
		default:
			return batch, overrun, err
		}
	}
}

// A connector's datagram is one event: its headers and a proc_event, 76
// bytes or so; recvBatchLen of them are read in one system call.
const (
	recvBatchLen  = 64
	recvSlotBytes = 512
)

// recvBatch is the buffers and headers of one recvmmsg(2).
type recvBatch struct {
	data []byte
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
}

func newRecvBatch() *recvBatch {
	b := &recvBatch{data: make([]byte, recvBatchLen*recvSlotBytes), hdrs: make([]unix.Mmsghdr, recvBatchLen), iovs: make([]unix.Iovec, recvBatchLen)}
	for i := range b.hdrs {
		b.iovs[i].Base = &b.data[i*recvSlotBytes]
		b.iovs[i].SetLen(recvSlotBytes)
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.Iovlen = 1
	}
	return b
}

// recv reads the datagrams waiting, up to recvBatchLen, without waiting.
// A raw system call: it never blocks (MSG_DONTWAIT), and the runtime's
// bookkeeping of one that might wakes its monitor thread (sysmon) from
// its sleep when the process was idle.
func (b *recvBatch) recv(fd uintptr) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), recvBatchLen, unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// datagram is datagram i of the last recv (a longer one, which no
// connector message is, cut to its slot: ParseEvents skips what is cut).
func (b *recvBatch) datagram(i int) []byte {
	return b.data[i*recvSlotBytes : i*recvSlotBytes+min(int(b.hdrs[i].Len), recvSlotBytes)]
}

// keep appends to batch the events of a datagram a caller is told of:
// forks only of the parents asked for (a filter past maxForkParents lets
// every process fork through).
func (c *Connector) keep(batch []Event, datagram []byte) []Event {
	from := len(batch)
	batch = appendEvents(batch, datagram)
	kept := batch[:from]
	for _, ev := range batch[from:] {
		if ev.Fork {
			c.mu.Lock()
			asked := c.parents[ev.Parent]
			c.mu.Unlock()
			if !asked {
				continue
			}
		}
		kept = append(kept, ev)
	}
	return kept
}

// ParseEvents reads the exec and exit events of a datagram from the
// process connector; anything else, or anything malformed, is skipped.
func ParseEvents(b []byte) []Event { return appendEvents(nil, b) }

// appendEvents is ParseEvents appending to evs.
func appendEvents(evs []Event, b []byte) []Event {
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
		case what == procEventFork && len(data) >= 16:
			// fork_proc_event: parent_pid, parent_tgid, child_pid, child_tgid
			parent := int(int32(binary.NativeEndian.Uint32(data[4:])))
			child := int(int32(binary.NativeEndian.Uint32(data[8:])))
			childTgid := int(int32(binary.NativeEndian.Uint32(data[12:])))
			if child == childTgid && child > 0 {
				evs = append(evs, Event{PID: child, Fork: true, Parent: parent})
			}
		}
	}
	return evs
}

func nlmAlign(n int) int { return (n + 3) &^ 3 }

// Offsets in a connector message: the proc_event's what, and its
// exec/exit payload's pid and tgid (the first two fields of both).
const (
	whatAt = nlmsgHdrLen + cnMsgLen
	pidAt  = whatAt + 16
	tgidAt = pidAt + 4
)

// eventFilter is a classic BPF program that keeps only the events
// ParseEvents reports: execs, and (with exits) the exits of processes,
// not of their other threads. The connector's fields are in host order
// and BPF loads words big-endian, so constants are compared as their
// bytes read big-endian.
func eventFilter(exits bool) []unix.SockFilter { return eventFilterWith(exits, nil) }

// eventFilterWith is eventFilter that also keeps the forks of new
// processes (not threads) by the parents named (every process fork past
// maxForkParents of them).
func eventFilterWith(exits bool, parents []int) []unix.SockFilter {
	be := func(v uint32) uint32 {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], v)
		return binary.BigEndian.Uint32(b[:])
	}
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jeqX = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X
		ret  = unix.BPF_RET | unix.BPF_K
	)
	if len(parents) > 0 {
		return forkFilter(exits, parents, be)
	}
	if !exits {
		return []unix.SockFilter{
			{Code: ldW, K: whatAt},
			{Code: jeqK, K: be(procEventExec), Jt: 0, Jf: 1},
			{Code: ret, K: 0xffffffff},
			{Code: ret, K: 0},
		}
	}
	return []unix.SockFilter{
		/* 0 */ {Code: ldW, K: whatAt},
		/* 1 */ {Code: jeqK, K: be(procEventExec), Jt: 5, Jf: 0}, // → 7, keep
		/* 2 */ {Code: jeqK, K: be(procEventExit), Jt: 0, Jf: 5}, // → 8, drop
		/* 3 */ {Code: ldW, K: pidAt},
		/* 4 */ {Code: unix.BPF_MISC | unix.BPF_TAX},
		/* 5 */ {Code: ldW, K: tgidAt},
		/* 6 */ {Code: jeqX, Jt: 0, Jf: 1}, // the thread group's leader: keep
		/* 7 */ {Code: ret, K: 0xffffffff},
		/* 8 */ {Code: ret, K: 0},
	}
}

// forkFilter keeps execs, process exits (with exits), and the process
// forks of parents. Its instructions are laid out with the two returns
// last, every jump counted to them.
func forkFilter(exits bool, parents []int, be func(uint32) uint32) []unix.SockFilter {
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jeqX = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X
		tax  = unix.BPF_MISC | unix.BPF_TAX
		ret  = unix.BPF_RET | unix.BPF_K
	)
	if len(parents) > maxForkParents {
		parents = nil // every process fork: Run keeps the parents' own
	}
	type ins struct {
		code   uint16
		k      uint32
		jt, jf string // "keep", "drop", "" (next), or a label below
		label  string
	}
	prog := []ins{
		{code: ldW, k: whatAt},
		{code: jeqK, k: be(procEventExec), jt: "keep"},
	}
	if exits {
		prog = append(prog,
			ins{code: jeqK, k: be(procEventExit), jf: "fork"},
			ins{code: ldW, k: pidAt}, ins{code: tax}, ins{code: ldW, k: tgidAt},
			ins{code: jeqX, jt: "keep", jf: "drop"},
			ins{label: "fork", code: ldW, k: whatAt})
	}
	prog = append(prog,
		ins{code: jeqK, k: be(procEventFork), jf: "drop"},
		// child_pid == child_tgid: a process, not a thread
		ins{code: ldW, k: pidAt + 8}, ins{code: tax}, ins{code: ldW, k: pidAt + 12},
		ins{code: jeqX, jf: "drop"},
		ins{code: ldW, k: pidAt + 4}) // parent_tgid
	if len(parents) == 0 {
		prog = append(prog, ins{code: unix.BPF_JMP | unix.BPF_JA, jt: "keep"})
	}
	for _, p := range parents {
		prog = append(prog, ins{code: jeqK, k: be(uint32(p)), jt: "keep"})
	}
	prog = append(prog, ins{label: "drop", code: ret, k: 0}, ins{label: "keep", code: ret, k: 0xffffffff})
	at := map[string]int{}
	for i, in := range prog {
		if in.label != "" {
			at[in.label] = i
		}
	}
	out := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		off := func(l string) uint8 {
			if l == "" {
				return 0
			}
			return uint8(at[l] - i - 1)
		}
		f := unix.SockFilter{Code: in.code, K: in.k, Jt: off(in.jt), Jf: off(in.jf)}
		if in.code == unix.BPF_JMP|unix.BPF_JA {
			f.K, f.Jt = uint32(at[in.jt]-i-1), 0
		}
		out[i] = f
	}
	return out
}
