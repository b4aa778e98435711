package attach

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"golang.org/x/sys/unix"
)

// Options tune a Client.
type Options struct {
	// Flags reads one of the VM's bool -XX flags as the VM has it
	// (package runtimes/hotspot's VM.BoolFlag); nil when the VM's memory
	// cannot be read: its command line and environment then decide.
	Flags func(name string) (bool, error)
	// MaxOutput bounds a command's output (DefaultMaxOutput when 0).
	MaxOutput int64
}

// DefaultMaxOutput bounds what a command may answer: a thread dump of
// 10,000 threads is about 20 MiB.
const DefaultMaxOutput = 64 << 20

// Client runs diagnostic commands in one JVM. Make one per target with
// New, Close it when done; it is safe for concurrent use.
type Client struct {
	pid, nspid int
	uid, gid   uint32
	opts       Options

	mu      sync.Mutex
	tmp     *os.File // the JVM's /tmp, opened in its mount namespace
	trigger *trigger // the .attach_pid file this client made, until the listener runs
	// Signalled says whether this client sent SIGQUIT (the JVM's
	// listener was not running yet).
	signalled bool
}

// trigger is a .attach_pid file made in a directory of the JVM.
type trigger struct {
	dir  *os.File
	name string
}

// New prepares a client for the JVM of pid. Nothing is sent to the JVM
// before a command is asked for.
func New(pid int, opts Options) (*Client, error) {
	st, err := procfs.ReadStatus(pid, pid)
	if err != nil {
		return nil, err
	}
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = DefaultMaxOutput
	}
	c := &Client{pid: pid, nspid: st.InnerPid(), uid: st.Uid[1], gid: st.Gid[1], opts: opts}
	if c.tmp, err = procfs.OpenInRoot(pid, "/tmp", false); err != nil {
		return nil, fmt.Errorf("the JVM's /tmp: %w", err)
	}
	return c, nil
}

// Signalled says whether the client sent the JVM SIGQUIT to start its
// attach listener.
func (c *Client) Signalled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signalled
}

// Close removes the trigger file the client made if it is still there,
// and lets go of the JVM's directories.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.removeTrigger()
	if c.tmp != nil {
		c.tmp.Close()
		c.tmp = nil
	}
	return err
}

func (c *Client) socketName() string { return ".java_pid" + strconv.Itoa(c.nspid) }

// listening says whether the JVM's attach socket exists and is its
// user's (or root's): one planted by anyone else is not the JVM's.
func (c *Client) listening() (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(c.tmp.Fd()), c.socketName(), &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%s/%s: %w", c.tmp.Name(), c.socketName(), err)
	case st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return false, fmt.Errorf("%s/%s is not a socket", c.tmp.Name(), c.socketName())
	case st.Uid != c.uid && st.Uid != 0:
		return false, fmt.Errorf("%s/%s is owned by uid %d, not the JVM's %d", c.tmp.Name(), c.socketName(), st.Uid, c.uid)
	}
	return true, nil
}

// Command runs one diagnostic command ("Compiler.perfmap",
// "Thread.print -l") and returns its output. When the JVM's attach
// listener does not run yet, Command starts it (a trigger file and
// SIGQUIT, after the checks that make that safe) and waits for it, all
// within ctx: past it, ErrNoAnswer. A command the JVM refuses is a
// *CommandError.
func (c *Client) Command(ctx context.Context, cmd string) ([]byte, error) {
	if err := c.awaitListener(ctx); err != nil {
		return nil, err
	}
	return c.run(ctx, cmd)
}

// awaitListener makes sure the JVM's attach listener runs.
func (c *Client) awaitListener(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tmp == nil {
		return errors.New("attach client closed")
	}
	ok, err := c.listening()
	if err != nil || ok {
		return err
	}
	if !c.signalled {
		if err := c.startListener(); err != nil {
			return err
		}
	}
	// HotSpot starts its listener within milliseconds of the signal
	// when it runs; poll as jattach does, quickly at first.
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("attach listener of pid %d not started: %w (%v)", c.pid, ErrNoAnswer, context.Cause(ctx))
		case <-time.After(delay):
		}
		ok, err := c.listening()
		if err != nil {
			return err
		}
		if ok {
			return c.removeTrigger()
		}
	}
}

// startListener checks that SIGQUIT is safe, makes the trigger file and
// sends the signal.
func (c *Client) startListener() error {
	st, err := procfs.ReadStatus(c.pid, c.pid)
	if err != nil {
		return err
	}
	cmdline, _ := procfs.Cmdline(c.pid)
	env, _ := procfs.Environ(c.pid)
	if err := checkSignal(st.SigCgt, st.SigIgn, c.opts.Flags, cmdline, env); err != nil {
		return err
	}
	if err := c.makeTrigger(); err != nil {
		return err
	}
	if err := unix.Kill(c.pid, unix.SIGQUIT); err != nil {
		c.removeTrigger()
		return fmt.Errorf("signal pid %d: %w", c.pid, err)
	}
	c.signalled = true
	return nil
}

// makeTrigger creates .attach_pid<pid> as the JVM's user in its working
// directory, else in its /tmp (the two places HotSpot looks), and keeps
// it only if the JVM will trust it: owned by the JVM's user (a
// filesystem may give a new file another owner).
func (c *Client) makeTrigger() error {
	name := ".attach_pid" + strconv.Itoa(c.nspid)
	cwd, err := os.Open(procfs.PidPath(c.pid, "cwd"))
	if err != nil {
		return err
	}
	tmp, err := dupDir(c.tmp)
	if err != nil {
		cwd.Close()
		return err
	}
	var errs []error
	for _, dir := range []*os.File{cwd, tmp} {
		made, err := c.createTrigger(dir, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if made {
			c.trigger = &trigger{dir: dir, name: name}
		}
		for _, d := range []*os.File{cwd, tmp} {
			if !made || d != dir {
				d.Close()
			}
		}
		return nil
	}
	cwd.Close()
	tmp.Close()
	return fmt.Errorf("no trigger file for the JVM's attach listener: %w", errors.Join(errs...))
}

// dupDir duplicates an open directory, for a trigger to keep its own.
func dupDir(d *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(d.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", d.Name(), err)
	}
	return os.NewFile(uintptr(fd), d.Name()), nil
}

// createTrigger creates name in dir as the JVM's user. made is false when
// a trigger the JVM trusts was there already (another jcmd's: it is left
// to it).
func (c *Client) createTrigger(dir *os.File, name string) (made bool, err error) {
	err = asUser(c.uid, c.gid, func() error {
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			return c.trusted(dir, name)
		}
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", dir.Name(), name, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Uid != c.uid {
			unix.Unlinkat(int(dir.Fd()), name, 0)
			return fmt.Errorf("%s/%s: created owned by uid %d, not the JVM's %d: it would not trust it", dir.Name(), name, st.Uid, c.uid)
		}
		made = true
		return nil
	})
	return made, err
}

// trusted checks a trigger that was there already.
func (c *Client) trusted(dir *os.File, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || (st.Uid != c.uid && st.Uid != 0) {
		return fmt.Errorf("%s/%s exists, and the JVM would not trust it", dir.Name(), name)
	}
	return nil
}

// removeTrigger removes the trigger this client made (c.mu held).
func (c *Client) removeTrigger() error {
	t := c.trigger
	if t == nil {
		return nil
	}
	c.trigger = nil
	defer t.dir.Close()
	err := asUser(c.uid, c.gid, func() error { return unix.Unlinkat(int(t.dir.Fd()), t.name, 0) })
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s/%s: %w", t.dir.Name(), t.name, err)
	}
	return nil
}

// CommandError is a command the JVM answered with a result code other
// than 0, and what it said.
type CommandError struct {
	Command string
	Code    int
	Output  string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("jcmd %s: the JVM answered %d: %s", e.Command, e.Code, strings.TrimSpace(e.Output))
}

// run sends one request and reads its answer.
func (c *Client) run(ctx context.Context, cmd string) ([]byte, error) {
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// The protocol's version, the operation and its three arguments:
	// jcmd takes the whole command line as its first.
	req := "1\x00jcmd\x00" + cmd + "\x00\x00\x00"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, c.ioError(ctx, "send", err)
	}
	out, err := io.ReadAll(io.LimitReader(conn, c.opts.MaxOutput+1))
	if err != nil {
		return nil, c.ioError(ctx, "read the answer", err)
	}
	if int64(len(out)) > c.opts.MaxOutput {
		return nil, fmt.Errorf("jcmd %s: the answer is longer than %d bytes", cmd, c.opts.MaxOutput)
	}
	code, rest, ok := bytes.Cut(out, []byte("\n"))
	n, err := strconv.Atoi(string(code))
	if !ok || err != nil {
		return nil, fmt.Errorf("jcmd %s: the JVM's answer does not start with a result code: %q", cmd, clip(out))
	}
	if n != 0 {
		return nil, &CommandError{Command: cmd, Code: n, Output: string(clip(rest))}
	}
	return rest, nil
}

// ioError says that the JVM stopped answering, or how the socket failed.
func (c *Client) ioError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s to pid %d: %w (%v)", what, c.pid, ErrNoAnswer, context.Cause(ctx))
	}
	return fmt.Errorf("%s to pid %d: %w", what, c.pid, err)
}

// connect connects to the JVM's socket as the JVM's user (the listener
// checks the peer's credentials), through the directory opened in the
// JVM's mount namespace.
func (c *Client) connect(ctx context.Context) (net.Conn, error) {
	c.mu.Lock()
	tmp := c.tmp
	c.mu.Unlock()
	if tmp == nil {
		return nil, errors.New("attach client closed")
	}
	path := fmt.Sprintf("/proc/self/fd/%d/%s", tmp.Fd(), c.socketName())
	var conn net.Conn
	err := asUser(c.uid, c.gid, func() error {
		var err error
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", path)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to pid %d: %w (%v)", c.pid, ErrNoAnswer, context.Cause(ctx))
		}
		return nil, fmt.Errorf("connect to the attach socket of pid %d: %w", c.pid, err)
	}
	return conn, nil
}

// clip shortens what a message quotes of the JVM's answer.
func clip(b []byte) []byte {
	if len(b) > 400 {
		return append(b[:400:400], "…"...)
	}
	return b
}
