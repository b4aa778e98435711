package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/watch"
)

// The control socket: a unix stream socket in a directory only the
// daemon's user can enter, and a peer check on each connection (root or
// the daemon's own user). A connection carries one request, a JSON object
// on one line, and one response.

// Request is a control command.
type Request struct {
	Op  string `json:"op"`            // "status" or "capture"
	PID int    `json:"pid,omitempty"` // capture: the process
}

// Response answers a Request.
type Response struct {
	Error   string          `json:"error,omitempty"`
	Status  *Status         `json:"status,omitempty"`
	Capture *CaptureOutcome `json:"capture,omitempty"`
}

// Status is the daemon's state: what `stallwatch ctl status` shows.
type Status struct {
	PID       int       `json:"pid"`
	Since     time.Time `json:"since"`
	Config    string    `json:"config"`
	Rules     int       `json:"rules"`
	Discovery string    `json:"discovery"`
	Out       string    `json:"out"`
	// Captures running now and stall captures in the last hour, with
	// their bounds.
	CapturesRunning  int `json:"captures_running"`
	MaxConcurrent    int `json:"max_concurrent_captures"`
	CapturesLastHour int `json:"stall_captures_last_hour"`
	MaxPerHour       int `json:"max_captures_per_hour"`
	// DiskUsed bytes in DiskCaptures captures under Out; DiskQuota 0
	// when unbounded.
	DiskUsed     int64 `json:"disk_used_bytes"`
	DiskQuota    int64 `json:"disk_quota_bytes"`
	DiskCaptures int   `json:"disk_captures"`
	// ExecsOverBudget are processes whose exec event was over the
	// daemon's bound for a second, left to the next scan.
	ExecsOverBudget uint64         `json:"execs_over_budget"`
	Taps            []TapStatus    `json:"taps,omitempty"`
	Targets         []TargetStatus `json:"targets"`
}

// TapStatus is one DogStatsD tap's counts.
type TapStatus struct {
	Addr       string `json:"addr"`
	Packets    uint64 `json:"packets"`
	Attributed uint64 `json:"attributed"`
	// KernelDrops are datagrams the packet socket's buffer had no room
	// for (PACKET_STATISTICS): heartbeats may have been missed.
	KernelDrops uint64 `json:"kernel_drops"`
	Malformed   uint64 `json:"malformed"`
}

// tapStatus is the control socket's form of the taps' counts.
func tapStatus(stats []watch.TapStats) []TapStatus {
	var out []TapStatus
	for _, st := range stats {
		out = append(out, TapStatus{Addr: st.Addr, Packets: st.Packets, Attributed: st.Attributed, KernelDrops: st.KernelDrops, Malformed: st.Malformed})
	}
	return out
}

// TargetStatus is one watched process.
type TargetStatus struct {
	PID        int       `json:"pid"`
	Command    string    `json:"command"`
	Rule       string    `json:"rule"`
	Heartbeats string    `json:"heartbeats"`
	State      string    `json:"state"`
	Since      time.Time `json:"since"`
	// HeartbeatAge is the silence of the most silent heartbeat; null
	// before the first beat.
	HeartbeatAge *Duration `json:"heartbeat_age"`
	StallFor     *Duration `json:"stall_for,omitempty"`
	Captures     int       `json:"captures"`
	LastCapture  string    `json:"last_capture,omitempty"`
}

// Duration is a duration written as a string in JSON ("1.5s"), as the
// logs write them.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// CaptureOutcome is what a capture asked for left.
type CaptureOutcome struct {
	PID int    `json:"pid"`
	Dir string `json:"dir,omitempty"`
	// CutShort says why the capture ended early, if it did.
	CutShort string `json:"cut_short,omitempty"`
}

// controlServer serves the control socket.
type controlServer struct {
	d    *Daemon
	dir  *safedir.Dir
	name string
	ln   *net.UnixListener
	uid  int
	ctx  context.Context
	stop context.CancelFunc
}

// maxRequest bounds a request line.
const maxRequest = 4096

// listenControl creates the socket at path: its directory is created (or
// opened) mode 0700 and must be trusted (internal/safedir); a stale
// socket is replaced; the socket is bound through the directory's
// descriptor, never through a path someone could swap.
func listenControl(path string, d *Daemon) (*controlServer, error) {
	dirPath, name := filepath.Split(path)
	dir, err := safedir.MkdirAll(filepath.Clean(dirPath), 0o700)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := dir.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		dir.Close()
		return nil, fmt.Errorf("control socket %s: removing a stale one: %w", path, err)
	}
	// /proc/self/fd/N/NAME resolves through the descriptor we hold.
	bind := "/proc/self/fd/" + strconv.Itoa(dir.Fd()) + "/" + name
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bind, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	ctx, stop := context.WithCancel(context.Background())
	return &controlServer{d: d, dir: dir, name: name, ln: ln, uid: os.Geteuid(), ctx: ctx, stop: stop}, nil
}

func (s *controlServer) close() {
	s.stop()
	s.ln.Close()
	_ = s.dir.Remove(s.name)
	s.dir.Close()
}

func (s *controlServer) serve() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if s.ctx.Err() == nil {
				s.d.log.Error("control socket", "err", err)
			}
			return
		}
		go s.handle(c)
	}
}

// peerAllowed: root, or the daemon's own user.
func (s *controlServer) peerAllowed(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	if cred.Uid != 0 && int(cred.Uid) != s.uid {
		return int(cred.Uid), fmt.Errorf("uid %d may not use the control socket (root or uid %d only)", cred.Uid, s.uid)
	}
	return int(cred.Uid), nil
}

func (s *controlServer) handle(c *net.UnixConn) {
	defer c.Close()
	uid, err := s.peerAllowed(c)
	if err != nil {
		s.d.log.Warn("control socket: refused a connection", "uid", uid, "err", err)
		writeResponse(c, Response{Error: err.Error()})
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReaderSize(c, maxRequest).ReadSlice('\n')
	if err != nil {
		writeResponse(c, Response{Error: "a request is one JSON object on one line, at most 4096 bytes"})
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		writeResponse(c, Response{Error: "bad request: " + err.Error()})
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	writeResponse(c, s.answer(c, req))
}

func (s *controlServer) answer(c *net.UnixConn, req Request) Response {
	switch req.Op {
	case "status":
		st, ok := s.d.Status()
		if !ok {
			return Response{Error: "stallwatch is stopping"}
		}
		return Response{Status: st}
	case "capture":
		ctx, cancel := context.WithCancel(s.ctx)
		defer cancel()
		go func() {
			// The client hanging up ends the wait (not the capture).
			var b [1]byte
			_, _ = c.Read(b[:])
			cancel()
		}()
		out, err := s.d.Capture(ctx, req.PID)
		if err != nil {
			return Response{Error: err.Error()}
		}
		return Response{Capture: out}
	}
	return Response{Error: fmt.Sprintf("unknown op %q: status or capture", req.Op)}
}

func writeResponse(c net.Conn, r Response) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	b, _ := json.Marshal(r)
	_, _ = c.Write(append(b, '\n'))
}

// Status returns the daemon's state; false once it stopped.
func (d *Daemon) Status() (*Status, bool) {
	var st *Status
	ok := d.call(func() {
		st = &Status{
			PID: d.self, Since: d.started, Config: d.cfg.File, Rules: len(d.cfg.Rules), Discovery: d.discover, Out: d.out,
			MaxConcurrent: d.cfg.MaxConcurrent, MaxPerHour: d.cfg.MaxPerHour, Targets: []TargetStatus{},
		}
		st.CapturesRunning, st.CapturesLastHour = d.lim.counts()
		st.DiskUsed, st.DiskQuota, st.DiskCaptures = d.quota.usage()
		st.Taps = tapStatus(d.taps.Stats())
		st.ExecsOverBudget = d.execBudget.over
		for _, t := range d.targets {
			st.Targets = append(st.Targets, t.status())
		}
	})
	if ok {
		sort.Slice(st.Targets, func(i, j int) bool { return st.Targets[i].PID < st.Targets[j].PID })
	}
	return st, ok
}

func (t *target) status() TargetStatus {
	ws := t.w.Status()
	ts := TargetStatus{
		PID: t.facts.PID, Command: commandLine(t.facts.Cmdline, 200), Rule: t.rule.Name, Heartbeats: t.w.Heartbeats(),
		State: ws.State, Since: t.since, Captures: ws.Captures, LastCapture: ws.LastCapture,
	}
	if ws.Beaten {
		age := Duration(ws.Age)
		ts.HeartbeatAge = &age
	}
	if ws.StallFor > 0 {
		sf := Duration(ws.StallFor)
		ts.StallFor = &sf
	}
	return ts
}

// NotWatchedError is a capture asked for a process no rule watches.
type NotWatchedError struct{ PID int }

func (e *NotWatchedError) Error() string {
	return fmt.Sprintf("pid %d is not watched (no rule selects it; stallwatch ctl status lists what is)", e.PID)
}

// Capture asks for a capture of a watched process now and waits for it
// to be written (or ctx to end the wait).
func (d *Daemon) Capture(ctx context.Context, pid int) (*CaptureOutcome, error) {
	var t *target
	if !d.call(func() { t = d.targets[pid] }) {
		return nil, errors.New("stallwatch is stopping")
	}
	if t == nil {
		return nil, &NotWatchedError{PID: pid}
	}
	w := t.gate.wait()
	t.log.Info("capture asked for on the control socket")
	t.w.CaptureNow()
	select {
	case o := <-w.done:
		if o.err != nil {
			return nil, o.err
		}
		out := &CaptureOutcome{PID: pid}
		if o.res != nil {
			out.Dir = o.res.Dir
			if o.res.Info.CutShort {
				out.CutShort = o.res.Info.CutShortWhy
			}
		}
		return out, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// dialHint says what a refused connection to the control socket means:
// no daemon, or a user it does not answer.
func dialHint(err error) string {
	if errors.Is(err, fs.ErrPermission) {
		return "the daemon answers root and its own user only"
	}
	return "is stallwatch daemon running?"
}

// Dial sends one request to the control socket at path and returns the
// response.
func Dial(ctx context.Context, path string, req Request) (*Response, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w (%s)", path, err, dialHint(err))
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	var resp Response
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&resp); err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("control socket %s: reading the answer: %w", path, err)
	}
	if resp.Error != "" {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}
