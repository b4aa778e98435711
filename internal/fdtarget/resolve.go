package fdtarget

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"golang.org/x/sys/unix"
)

// Kind is what sort of file a descriptor refers to.
type Kind string

const (
	KindFile     Kind = "file"
	KindDir      Kind = "directory"
	KindDevice   Kind = "device"
	KindFIFO     Kind = "fifo"
	KindPipe     Kind = "pipe"
	KindSocket   Kind = "socket"
	KindEpoll    Kind = "epoll"
	KindEventfd  Kind = "eventfd"
	KindSignalfd Kind = "signalfd"
	KindTimerfd  Kind = "timerfd"
	KindInotify  Kind = "inotify"
	KindPidfd    Kind = "pidfd"
	KindOther    Kind = "other"
)

// Target is what one descriptor of a process refers to, and who is at
// its other end.
type Target struct {
	FD   int
	Kind Kind
	// Link is the descriptor's /proc/<pid>/fd link as the kernel wrote it
	// ("socket:[8812]", "/var/lib/db (deleted)").
	Link string
	// Inode is the file's inode (the N of "pipe:[N]", "socket:[N]").
	Inode uint64
	// Path is a file's path as the process sees it (its root's prefix
	// removed); Deleted when the file was unlinked.
	Path    string
	Deleted bool
	// Pos and Flags are the descriptor's offset and open flags.
	Pos   int64
	Flags int
	// Device names the block device a file lives on ("vda", or
	// "0:45" for a file system without one); DevMajor and DevMinor are
	// its number (st_dev), as /proc/diskstats lists devices.
	Device             string
	DevMajor, DevMinor uint32

	Socket   *Socket
	Epoll    *Epoll
	Eventfd  *Eventfd
	Timerfd  *Timerfd
	Sigmask  uint64
	PidfdPID int

	// Peers are the processes holding the other end: of a pipe or FIFO
	// (every holder but this descriptor, each with its access), of a
	// UNIX socket (its peer socket), of a TCP or UDP socket (the peer
	// socket, when it is in the same network namespace; or the listener
	// that has not accepted it yet, Socket.NotAccepted).
	Peers []Holder
	// PeersSearched says the other end was looked for in every process
	// (the search was neither cut short by its bound nor impossible).
	PeersSearched bool

	// Err says what could not be read of it.
	Err error
}

// Socket is what a socket is: protocol, addresses, state, queues.
type Socket struct {
	// Proto is the kernel's name of its protocol ("TCP", "TCPv6",
	// "UDP", "UDPv6", "UNIX", "UNIX-STREAM", "NETLINK", …).
	Proto string
	// Local and Remote are an inet socket's addresses (Remote invalid
	// or port 0 when not connected).
	Local, Remote netip.AddrPort
	// Name is a UNIX socket's bound name and PeerName its peer's ("@…"
	// abstract; "" unbound).
	Name, PeerName string
	// Type is a UNIX socket's: "stream", "dgram", "seqpacket".
	Type string
	// State is "ESTABLISHED", "LISTEN", "CLOSE_WAIT", … for TCP;
	// "CONNECTED", "LISTEN", "UNCONNECTED" for UNIX sockets and UDP.
	State string
	// RecvQ and SendQ are bytes waiting to be read, and sent but not
	// yet acknowledged (TCP) or read by the peer (UNIX); for a listening
	// socket, connections waiting to be accepted and the backlog.
	RecvQ, SendQ uint64
	HasQueues    bool
	// PeerInode is the socket at the other end, when known.
	PeerInode uint64
	// NotAccepted says the peer socket is a connection its listener
	// has not accepted (Peers then hold the listener).
	NotAccepted bool
	// Found says the socket was found in its namespace's tables; when
	// false only Proto is known.
	Found bool
}

// Listening reports whether the socket listens.
func (s *Socket) Listening() bool { return s.State == "LISTEN" }

// Epoll is an epoll set.
type Epoll struct {
	// Count is how many descriptors are registered; Items the first of
	// them, each with its target.
	Count int
	Items []EpollTarget
}

// EpollTarget is one registered descriptor.
type EpollTarget struct {
	FD     int
	Events uint32
	// Target is what FD refers to now; Closed says it no longer refers
	// to the file that was registered (closed and its number reused, or
	// closed while another descriptor keeps the registration alive).
	Target *Target
	Closed bool
}

// Options bound the work of a Resolve.
type Options struct {
	// MaxScan bounds how many descriptors of all processes are looked at
	// to find the other ends of pipes and sockets (DefaultMaxScan).
	MaxScan int
	// MaxEpoll bounds how many descriptors of an epoll set are resolved
	// (DefaultMaxEpoll); the rest are counted.
	MaxEpoll int
	// MaxTableBytes bounds what is read of each socket table
	// (DefaultMaxTableBytes).
	MaxTableBytes int64
	// Syscall names a holder's system call whose first argument is a
	// descriptor, to say a holder's thread is blocked on the other end;
	// nil: not looked for.
	Syscall SyscallNamer
}

// Defaults of Options. A readlink of /proc/<pid>/fd/<n> costs 1–8 µs:
// the scan's bound is under half a second at worst.
const (
	DefaultMaxScan       = 50_000
	DefaultMaxEpoll      = 16
	DefaultMaxTableBytes = 64 << 20
	maxPeersEach         = 16
)

// Result is what Resolve found.
type Result struct {
	Targets map[int]*Target
	// Scanned and Processes count the descriptors and processes looked
	// at for other ends.
	Scanned, Processes int
	// Notes say what was bounded or could not be read, once each.
	Notes []string
}

func (r *Result) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if !slices.Contains(r.Notes, s) {
		r.Notes = append(r.Notes, s)
	}
}

// resolver is one Resolve.
type resolver struct {
	pid  int
	opts Options
	res  *Result
	root string // the process's root as the kernel prints it ("/" or a chroot)
	// all lists every target made, epoll items' included.
	all []*Target
}

// Resolve says what each of process pid's descriptors fds refers to, as
// the process sees it: files by path (its root's prefix removed), offset
// and device; sockets from the tables and sock_diag of its own network
// namespace; and the processes at the other end of its pipes and sockets.
// Each part is bounded (Options); what could not be known is in each
// Target's Err and the Result's Notes.
func Resolve(pid int, fds []int, opts Options) *Result {
	if opts.MaxScan <= 0 {
		opts.MaxScan = DefaultMaxScan
	}
	if opts.MaxEpoll <= 0 {
		opts.MaxEpoll = DefaultMaxEpoll
	}
	if opts.MaxTableBytes <= 0 {
		opts.MaxTableBytes = DefaultMaxTableBytes
	}
	r := &resolver{pid: pid, opts: opts, res: &Result{Targets: map[int]*Target{}}}
	r.root, _ = os.Readlink(procfs.PidPath(pid, "root"))
	for _, fd := range fds {
		if _, done := r.res.Targets[fd]; done || fd < 0 {
			continue
		}
		r.res.Targets[fd] = r.target(fd, true)
	}
	r.sockets()
	r.peers()
	return r.res
}

// target reads one descriptor; epoll sets are expanded when top.
func (r *resolver) target(fd int, top bool) *Target {
	t := &Target{FD: fd, Kind: KindOther}
	r.all = append(r.all, t)
	fdPath := procfs.PidPath(r.pid, "fd", strconv.Itoa(fd))
	link, err := os.Readlink(fdPath)
	if err != nil {
		t.Err = procfsErr(err)
		return t
	}
	t.Link = link
	limit := int64(1 << 20)
	if link == "anon_inode:[eventpoll]" && top {
		limit = 16 << 20 // a set of 100,000 descriptors prints 9 MB
	}
	var fi Fdinfo
	if b, err := procfs.ReadLimited(procfs.PidPath(r.pid, "fdinfo", strconv.Itoa(fd)), limit); err == nil {
		fi = ParseFdinfo(b)
		t.Pos, t.Flags, t.Inode = fi.Pos, fi.Flags, fi.Ino
	} else if !errors.Is(err, procfs.ErrGone) {
		t.Err = err
	}
	switch {
	case strings.HasPrefix(link, "socket:["):
		t.Kind = KindSocket
		t.Inode, _ = linkInode(link, "socket")
		t.Socket = &Socket{Proto: sockProto(fdPath)}
	case strings.HasPrefix(link, "pipe:["):
		t.Kind = KindPipe
		t.Inode, _ = linkInode(link, "pipe")
	case link == "anon_inode:[eventpoll]":
		t.Kind = KindEpoll
		t.Epoll = &Epoll{Count: fi.EpollCount}
		if top {
			r.epoll(t, fi)
		}
	case link == "anon_inode:[eventfd]":
		t.Kind, t.Eventfd = KindEventfd, fi.Eventfd
	case link == "anon_inode:[signalfd]":
		t.Kind, t.Sigmask = KindSignalfd, fi.Sigmask
	case link == "anon_inode:[timerfd]":
		t.Kind, t.Timerfd = KindTimerfd, fi.Timerfd
	case link == "anon_inode:inotify" || link == "anon_inode:[inotify]":
		t.Kind = KindInotify
	case link == "anon_inode:[pidfd]" || fi.HasPid:
		t.Kind, t.PidfdPID = KindPidfd, fi.Pid
	case strings.HasPrefix(link, "/"):
		r.file(t, fdPath)
	}
	return t
}

// file fills a descriptor of a file system object.
func (r *resolver) file(t *Target, fdPath string) {
	p, deleted := strings.CutSuffix(t.Link, " (deleted)")
	t.Path, t.Deleted = r.inRoot(p), deleted
	t.Kind = KindFile
	var st unix.Stat_t
	if err := unix.Stat(fdPath, &st); err != nil {
		return
	}
	t.Inode = st.Ino
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		t.Kind = KindDir
	case unix.S_IFCHR, unix.S_IFBLK:
		t.Kind = KindDevice
	case unix.S_IFIFO:
		t.Kind = KindFIFO
	}
	t.Device = deviceName(st.Dev)
	t.DevMajor, t.DevMinor = unix.Major(st.Dev), unix.Minor(st.Dev)
}

// inRoot removes the process's root from a path the kernel printed
// relative to ours (a chrooted or containerised process's files).
func (r *resolver) inRoot(p string) string {
	if r.root == "" || r.root == "/" {
		return p
	}
	if rest, ok := strings.CutPrefix(p, r.root); ok && (rest == "" || rest[0] == '/') {
		if rest == "" {
			return "/"
		}
		return rest
	}
	return p
}

// deviceName names the device of st_dev: the block device's kernel name
// (/sys/dev/block/M:m/uevent DEVNAME), else "M:m".
func deviceName(dev uint64) string {
	mm := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	b, err := procfs.ReadLimited(filepath.Join("/sys/dev/block", mm, "uevent"), 64<<10)
	if err != nil {
		return mm
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok && name != "" {
			return name
		}
	}
	return mm
}

// sockProto asks the socket's file system which protocol it is
// (the system.sockprotoname attribute of any socket's inode).
func sockProto(fdPath string) string {
	var buf [64]byte
	n, err := unix.Getxattr(fdPath, "system.sockprotoname", buf[:])
	if err != nil || n <= 0 {
		return ""
	}
	return strings.TrimRight(string(buf[:n]), "\x00")
}

// epoll resolves the first MaxEpoll descriptors of a set.
func (r *resolver) epoll(t *Target, fi Fdinfo) {
	for i, it := range fi.Epoll {
		if i >= r.opts.MaxEpoll {
			break
		}
		et := EpollTarget{FD: it.FD, Events: it.Events, Target: r.target(it.FD, false)}
		// The registration holds the file registered; its number may
		// since name another file.
		et.Closed = et.Target.Err != nil || (it.Ino != 0 && et.Target.Inode != 0 && et.Target.Inode != it.Ino)
		t.Epoll.Items = append(t.Epoll.Items, et)
	}
}

// ErrNotOpen is a descriptor the process does not have open (it was
// closed since it was named, or the process exited).
var ErrNotOpen = errors.New("descriptor not open")

func procfsErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrNotOpen, err)
	}
	return err
}
