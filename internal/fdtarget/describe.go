package fdtarget

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stallwatch/stallwatch/internal/termsafe"
	"golang.org/x/sys/unix"
)

// String says what the descriptor is connected to, on one line, with
// every name the target or its peers chose escaped (termsafe): "TCP
// 10.0.0.5:5432 (ESTABLISHED, 0 bytes queued; from 10.0.0.7:40122) —
// pid 812 (postgres), sleeping", "pipe:[4411] read by pid 812 (logger),
// which is stopped".
func (t *Target) String() string {
	if t == nil {
		return "unknown"
	}
	if t.Link == "" {
		if t.Err != nil {
			return "unknown (" + shortErr(t.Err) + ")"
		}
		return "unknown"
	}
	switch t.Kind {
	case KindFile:
		return t.fileString()
	case KindDir:
		return "directory " + termsafe.String(t.Path)
	case KindDevice:
		return "device " + termsafe.String(t.Path)
	case KindFIFO:
		return "FIFO " + termsafe.String(t.Path) + t.pipeEnds()
	case KindPipe:
		return t.Link + t.pipeEnds()
	case KindSocket:
		return t.socketString()
	case KindEpoll:
		return t.epollString()
	case KindEventfd:
		return eventfdString(t.Eventfd)
	case KindSignalfd:
		return "signalfd for " + signalsOf(t.Sigmask)
	case KindTimerfd:
		return timerfdString(t.Timerfd)
	case KindPidfd:
		if t.PidfdPID > 0 {
			return fmt.Sprintf("pidfd of pid %d", t.PidfdPID)
		}
		return "pidfd of a process that exited"
	case KindInotify:
		return "inotify"
	}
	return termsafe.String(t.Link)
}

func (t *Target) fileString() string {
	var b strings.Builder
	b.WriteString(termsafe.String(t.Path))
	if t.Deleted {
		b.WriteString(" (deleted)")
	}
	fmt.Fprintf(&b, " at offset %d", t.Pos)
	if t.Device != "" {
		b.WriteString(" on " + termsafe.String(t.Device))
	}
	return b.String()
}

// OtherEnds are the holders at the other end: of a pipe or FIFO its
// readers when this descriptor writes, its writers when it reads; of a
// socket its peer's holders.
func (t *Target) OtherEnds() []Holder {
	if t.Kind != KindPipe && t.Kind != KindFIFO {
		return t.Peers
	}
	want := "write"
	if accessOf(t.Flags) == "write" {
		want = "read"
	}
	var ends []Holder
	for _, h := range t.Peers {
		if h.Access == want || h.Access == "read-write" {
			ends = append(ends, h)
		}
	}
	return ends
}

// pipeEnds names who holds the other end of a pipe or FIFO.
func (t *Target) pipeEnds() string {
	verb := "written by"
	if accessOf(t.Flags) == "write" {
		verb = "read by"
	}
	ends := t.OtherEnds()
	if len(ends) == 0 {
		if t.PeersSearched {
			return ", whose other end no other descriptor holds"
		}
		return ""
	}
	return " " + verb + " " + holdersString(ends)
}

func holdersString(hs []Holder) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", and ")
}

// String names a holder and what it is doing: "pid 812 (logger), which
// is stopped", "this process (fd 7)", "pid 90 (server), sleeping in read
// on it (tid 91)".
func (h Holder) String() string {
	if h.Self {
		// Its own state is the snapshot's to tell, thread by thread.
		return fmt.Sprintf("this process (fd %d)", h.FD)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d (%s)", h.PID, termsafe.String(h.Name))
	switch h.State {
	case "":
	case "stopped", "traced", "exited":
		b.WriteString(", which " + map[bool]string{true: "has", false: "is"}[h.State == "exited"] + " " + h.State)
	default:
		b.WriteString(", " + h.State)
		if h.Syscall != "" {
			fmt.Fprintf(&b, " in %s on it (tid %d)", h.Syscall, h.TID)
		}
	}
	return b.String()
}

func (t *Target) socketString() string {
	s := t.Socket
	if s == nil || !s.Found {
		proto := "socket"
		if s != nil && s.Proto != "" {
			proto = termsafe.String(s.Proto) + " socket"
		}
		return fmt.Sprintf("%s %s (not in the tables of its network namespace)", proto, t.Link)
	}
	if isUnix(s.Proto) {
		return t.unixString()
	}
	var b strings.Builder
	proto := strings.TrimSuffix(s.Proto, "v6")
	if s.Listening() {
		fmt.Fprintf(&b, "%s listening on %s (%s)", proto, s.Local, plural(s.RecvQ, "connection")+" waiting to be accepted")
		return b.String()
	}
	if s.Remote.Port() == 0 {
		fmt.Fprintf(&b, "%s %s (%s, %s)", proto, s.Local, s.State, queued(s))
		return b.String()
	}
	fmt.Fprintf(&b, "%s %s (%s, %s; from %s)", proto, s.Remote, s.State, queued(s), s.Local)
	b.WriteString(t.peerString())
	return b.String()
}

// queued says what the socket's queues hold.
func queued(s *Socket) string {
	if !s.HasQueues {
		return "queues unknown"
	}
	if s.RecvQ == 0 && s.SendQ == 0 {
		return "0 bytes queued"
	}
	var parts []string
	if s.RecvQ > 0 {
		parts = append(parts, plural(s.RecvQ, "byte")+" to read")
	}
	if s.SendQ > 0 {
		parts = append(parts, plural(s.SendQ, "byte")+" sent and not yet taken")
	}
	return strings.Join(parts, ", ")
}

func (t *Target) peerString() string {
	s := t.Socket
	switch {
	case len(t.Peers) > 0 && s.NotAccepted:
		return " — not yet accepted by " + holdersString(t.Peers)
	case len(t.Peers) > 0:
		return " — " + holdersString(t.Peers)
	case s.PeerInode != 0 && t.PeersSearched:
		return " — its peer socket is held by no process"
	}
	return ""
}

func (t *Target) unixString() string {
	s := t.Socket
	var b strings.Builder
	b.WriteString("UNIX")
	if s.Type != "" {
		b.WriteString(" " + s.Type)
	}
	b.WriteString(" socket")
	switch {
	case s.Listening():
		fmt.Fprintf(&b, " listening on %s (%s)", unixName(s.Name), plural(s.RecvQ, "connection")+" waiting to be accepted")
		return b.String()
	case s.PeerName != "":
		b.WriteString(" connected to " + unixName(s.PeerName))
	case s.Name != "":
		b.WriteString(" bound to " + unixName(s.Name))
	case s.PeerInode != 0:
		b.WriteString(" connected to an unnamed socket")
	case s.State == "CONNECTED" && s.Type == "stream":
		// The kernel gives a connection's server end an inode when it is
		// accepted: until then sock_diag names no peer.
		b.WriteString(" connected to a socket no process holds (not accepted yet, or closed)")
	}
	fmt.Fprintf(&b, " (%s, %s)", s.State, queued(s))
	b.WriteString(t.peerString())
	return b.String()
}

func unixName(n string) string {
	if n == "" {
		return "an unnamed socket"
	}
	return termsafe.String(n)
}

func (t *Target) epollString() string {
	e := t.Epoll
	var b strings.Builder
	fmt.Fprintf(&b, "epoll set of %s", plural(uint64(e.Count), "descriptor"))
	for i, it := range e.Items {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "fd %d → %s", it.FD, it.Target)
		if it.Closed {
			b.WriteString(" (closed since it was added)")
		}
	}
	if more := e.Count - len(e.Items); more > 0 && len(e.Items) > 0 {
		fmt.Fprintf(&b, "; and %d more", more)
	}
	return b.String()
}

func eventfdString(e *Eventfd) string {
	if e == nil {
		return "eventfd"
	}
	s := fmt.Sprintf("eventfd (count %d", e.Count)
	if e.Semaphore {
		s += ", semaphore"
	}
	return s + ")"
}

// signalsOf names the signals of a mask (bit n-1 for signal n).
func signalsOf(mask uint64) string {
	var names []string
	for n := 1; n <= 64; n++ {
		if mask&(1<<(n-1)) == 0 {
			continue
		}
		name := unix.SignalName(syscall.Signal(n))
		if name == "" {
			name = "signal " + strconv.Itoa(n)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return "no signal"
	}
	return strings.Join(names, ", ")
}

var clockNames = map[int]string{0: "CLOCK_REALTIME", 1: "CLOCK_MONOTONIC", 7: "CLOCK_BOOTTIME", 8: "CLOCK_REALTIME_ALARM", 9: "CLOCK_BOOTTIME_ALARM"}

func timerfdString(tf *Timerfd) string {
	if tf == nil {
		return "timerfd"
	}
	clock, ok := clockNames[tf.Clock]
	if !ok {
		clock = "clock " + strconv.Itoa(tf.Clock)
	}
	s := "timerfd on " + clock
	switch {
	case tf.Value == 0 && tf.Interval == 0:
		s += ", disarmed"
	case tf.Interval == 0:
		s += ", firing once in " + roundDur(tf.Value)
	default:
		s += ", next in " + roundDur(tf.Value) + ", every " + tf.Interval.String()
	}
	if tf.Ticks > 0 {
		s += fmt.Sprintf(", %s unread", plural(tf.Ticks, "expiration"))
	}
	return s
}

// roundDur rounds what is left of a timer to what a reader needs: to the
// second from ten seconds on, else to the millisecond.
func roundDur(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func plural(n uint64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatUint(n, 10) + " " + what + "s"
}

func shortErr(err error) string {
	if errors.Is(err, ErrNotOpen) {
		return "descriptor not open"
	}
	return err.Error()
}
