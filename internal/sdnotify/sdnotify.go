// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): newline-separated VAR=value assignments, one datagram
// each, sent to the unix datagram socket NOTIFY_SOCKET names — READY=1
// once the service works, STATUS= for `systemctl status`, RELOADING=1 and
// STOPPING=1, and WATCHDOG=1 at least every WatchdogSec= so that systemd
// restarts a daemon that hangs. It is a few lines over a unixgram socket,
// which is why stallwatch does not import a library for it.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier sends notifications to the service manager. A nil *Notifier
// (no NOTIFY_SOCKET) sends nothing.
type Notifier struct {
	conn *net.UnixConn
	addr *net.UnixAddr
}

// FromEnv returns the notifier NOTIFY_SOCKET names, or nil when it is
// unset (not run by systemd, or not Type=notify). It unsets
// NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID so that the programs
// stallwatch starts (hooks) do not talk to systemd in its name; read
// Watchdog first.
func FromEnv() (*Notifier, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	if name == "" {
		return nil, nil
	}
	if name[0] != '/' && name[0] != '@' {
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: neither a path nor an abstract socket (@name)", name)
	}
	// An unbound datagram socket: the manager sends no reply.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	f := os.NewFile(uintptr(fd), "notify")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	conn := c.(*net.UnixConn)
	return &Notifier{conn: conn, addr: &net.UnixAddr{Name: name, Net: "unixgram"}}, nil
}

// Send sends assignments ("READY=1", "STATUS=watching 3") in one
// datagram.
func (n *Notifier) Send(assignments ...string) error {
	if n == nil {
		return nil
	}
	for _, a := range assignments {
		if strings.ContainsRune(a, '\n') {
			return fmt.Errorf("sd_notify: newline in %q", a)
		}
	}
	_, err := n.conn.WriteToUnix([]byte(strings.Join(assignments, "\n")), n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify to %s: %w", n.addr.Name, err)
	}
	return nil
}

// Ready says the service is up, with a status line.
func (n *Notifier) Ready(status string) error { return n.Send("READY=1", "STATUS="+status) }

// Status sets the status line `systemctl status` shows.
func (n *Notifier) Status(status string) error { return n.Send("STATUS=" + status) }

// Reloading says the configuration is being read again (Type=notify-reload
// also wants the monotonic time); Ready ends it.
func (n *Notifier) Reloading() error {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return n.Send("RELOADING=1", "MONOTONIC_USEC="+strconv.FormatInt(ts.Nano()/1000, 10))
}

// Stopping says the service is stopping.
func (n *Notifier) Stopping() error { return n.Send("STOPPING=1") }

// Ping tells the manager's watchdog the service is alive.
func (n *Notifier) Ping() error { return n.Send("WATCHDOG=1") }

// Close closes the socket.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	return n.conn.Close()
}

// Watchdog returns the period WatchdogSec= set (WATCHDOG_USEC) when it
// applies to this process (WATCHDOG_PID is unset or names it); a service
// pings at half of it. Call it before FromEnv, which unsets both.
func Watchdog() (time.Duration, bool) {
	usec, err := strconv.ParseUint(os.Getenv("WATCHDOG_USEC"), 10, 63)
	defer os.Unsetenv("WATCHDOG_USEC")
	defer os.Unsetenv("WATCHDOG_PID")
	if err != nil || usec == 0 {
		return 0, false
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	return time.Duration(usec) * time.Microsecond, true
}
