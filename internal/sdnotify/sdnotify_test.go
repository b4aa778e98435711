package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen is the service manager's end: a unixgram socket.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := c.ReadFromUnix(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@stallwatch-sdnotify-test-" + strconv.Itoa(os.Getpid())} {
		t.Run(name[:1], func(t *testing.T) {
			srv := listen(t, name)
			t.Setenv("NOTIFY_SOCKET", name)
			n, err := FromEnv()
			if err != nil || n == nil {
				t.Fatalf("FromEnv: %v, %v", n, err)
			}
			defer n.Close()
			if os.Getenv("NOTIFY_SOCKET") != "" {
				t.Errorf("NOTIFY_SOCKET is still set: programs we start would notify in our name")
			}
			if err := n.Ready("watching 3 processes"); err != nil {
				t.Fatal(err)
			}
			if got := read(t, srv); got != "READY=1\nSTATUS=watching 3 processes" {
				t.Errorf("got %q", got)
			}
			_ = n.Reloading()
			if got := read(t, srv); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
				t.Errorf("got %q", got)
			}
			_ = n.Ping()
			if got := read(t, srv); got != "WATCHDOG=1" {
				t.Errorf("got %q", got)
			}
			if err := n.Status("a\nb"); err == nil {
				t.Errorf("a newline in a status was sent")
			}
		})
	}
}

func TestNotUnderSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n, err := FromEnv()
	if n != nil || err != nil {
		t.Fatalf("FromEnv without NOTIFY_SOCKET: %v, %v", n, err)
	}
	if err := n.Ready("x"); err != nil {
		t.Errorf("a nil notifier failed: %v", err)
	}
	t.Setenv("NOTIFY_SOCKET", "relative/path")
	if _, err := FromEnv(); err == nil {
		t.Errorf("a relative NOTIFY_SOCKET was accepted")
	}
}

func TestWatchdog(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if d, ok := Watchdog(); !ok || d != 30*time.Second {
		t.Errorf("Watchdog() = %v, %v", d, ok)
	}
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", "1")
	if _, ok := Watchdog(); ok {
		t.Errorf("a watchdog meant for pid 1 applied to us")
	}
	t.Setenv("WATCHDOG_USEC", "")
	if _, ok := Watchdog(); ok {
		t.Errorf("no WATCHDOG_USEC, yet a watchdog")
	}
}
