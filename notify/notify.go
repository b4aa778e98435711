package notify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/alert"
	"github.com/stallwatch/stallwatch/notify/hook"
	"github.com/stallwatch/stallwatch/notify/spool"
	"github.com/stallwatch/stallwatch/notify/upload"
	"github.com/stallwatch/stallwatch/watchdog"
)

// Config says what to act with; each part may be nil (not configured).
type Config struct {
	Alerts    *alert.Client
	Hooks     *hook.Runner
	OnCapture string // --on-capture
	OnRecover string // --on-recover
	Uploads   *spool.Spool
	// Host names this machine in hooks' environment.
	Host   string
	Logger *slog.Logger
}

// Target is a watched process.
type Target struct {
	PID     int
	Process string // its process name (runtimes.ProcessName)
	// Service is its service (--service, DD_SERVICE, or a daemon rule's);
	// "" names it by its process.
	Service string
	// Tags are the target's own, beyond the process-wide ones the alert
	// client and the uploader carry.
	Tags []string
	// OnCapture and OnRecover are the target's own hook commands (a
	// daemon rule's), run in place of Config's when not empty.
	OnCapture, OnRecover string
}

// queueLen bounds the events waiting: far more than stalls and reports
// of 200 targets make in a second.
const queueLen = 1024

type job struct {
	t  Target
	ev watchdog.Event
}

// Notifier turns watchdog events into alerts, hooks and uploads.
type Notifier struct {
	cfg     Config
	log     *slog.Logger
	jobs    chan job
	ups     chan spool.Item
	done    sync.WaitGroup
	closed  atomic.Bool
	dropped atomic.Uint64
	mu      sync.Mutex // guards jobs against a send after Close
}

// New starts a Notifier.
func New(cfg Config) *Notifier {
	n := &Notifier{cfg: cfg, log: cfg.Logger, jobs: make(chan job, queueLen), ups: make(chan spool.Item, queueLen)}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.cfg.Host == "" {
		n.cfg.Host, _ = os.Hostname()
	}
	n.done.Add(2)
	go n.work()
	go n.queueUploads()
	return n
}

// For returns the watchdog.Config.Events handler of target t.
func (n *Notifier) For(t Target) func(watchdog.Event) {
	return func(ev watchdog.Event) { n.handle(t, ev) }
}

func (n *Notifier) handle(t Target, ev watchdog.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed.Load() {
		return
	}
	select {
	case n.jobs <- job{t, ev}:
	default:
		if d := n.dropped.Add(1); d == 1 || d%100 == 0 {
			n.log.Warn("alerts and hooks fall behind; events dropped", "pid", t.PID, "event", ev.Kind, "dropped", d)
		}
	}
}

// Dropped is how many events were dropped because the queue was full.
func (n *Notifier) Dropped() uint64 { return n.dropped.Load() }

// Close acts on the events already handed over, queues their uploads,
// and stops. It does not close the alert client, the hooks or the spool.
func (n *Notifier) Close() {
	n.mu.Lock()
	if n.closed.Swap(true) {
		n.mu.Unlock()
		return
	}
	close(n.jobs)
	n.mu.Unlock()
	n.done.Wait()
}

func (n *Notifier) work() {
	defer n.done.Done()
	defer close(n.ups)
	for j := range n.jobs {
		n.act(j.t, j.ev)
	}
}

func (n *Notifier) queueUploads() {
	defer n.done.Done()
	for it := range n.ups {
		if err := n.cfg.Uploads.Add(it); err != nil {
			n.log.Error("the capture could not be queued for upload; it stays on disk", "dir", it.Key, "err", err)
		}
	}
}

func alertTarget(t Target) alert.Target {
	return alert.Target{PID: t.PID, Process: t.Process, Name: t.Service, Tags: t.Tags}
}

func stallOf(s watchdog.StallInfo) alert.Stall {
	return alert.Stall{Start: s.Start, For: s.For, Source: s.Source, Reason: s.Reason}
}

// act carries out one event: alerts first, then hooks, then uploads.
func (n *Notifier) act(t Target, ev watchdog.Event) {
	a := n.cfg.Alerts
	at := alertTarget(t)
	switch ev.Kind {
	case watchdog.StallBegan:
		a.Stalled(at, stallOf(ev.Stall))
	case watchdog.CaptureDone:
		if ev.Result == nil {
			return // the watchdog logged why
		}
		n.captured(t, at, ev)
	case watchdog.Recovered:
		var dirs []string
		for _, r := range ev.Captures {
			dirs = append(dirs, r.Dir)
		}
		a.Recovered(at, stallOf(ev.Stall), ev.Stall.For, dirs)
		env := n.env(t, "recover", ev.Stall.For)
		if len(dirs) > 0 {
			env.Dir = dirs[len(dirs)-1]
			env.TopFinding = topFinding(ev.Captures[len(ev.Captures)-1])
			env.Trigger = string(ev.Captures[len(ev.Captures)-1].Trigger.Kind)
		}
		n.runHook("on-recover", cmp.Or(t.OnRecover, n.cfg.OnRecover), env)
	case watchdog.Exited:
		var s *alert.Stall
		if !ev.Stall.Start.IsZero() {
			st := stallOf(ev.Stall)
			s = &st
		}
		a.Exited(at, s)
	case watchdog.Heartbeat:
		if ev.Beaten {
			a.Heartbeat(at, ev.Age, ev.Stalled)
		}
	}
}

func (n *Notifier) captured(t Target, at alert.Target, ev watchdog.Event) {
	res := ev.Result
	cp := alert.Capture{Dir: res.Dir, Trigger: string(res.Trigger.Kind), Findings: findings(res),
		Samples: res.Info.Counts.Samples, Lost: res.Info.Counts.Lost + res.Info.Counts.LostSamples}
	if res.Info.CutShort {
		cp.CutShort = res.Info.CutShortWhy
	}
	if !ev.Stall.Start.IsZero() {
		s := stallOf(ev.Stall)
		cp.Stall = &s
	}
	n.cfg.Alerts.Captured(at, cp)
	env := n.env(t, "capture", res.Trigger.StallFor)
	env.Dir, env.Trigger = res.Dir, string(res.Trigger.Kind)
	if len(cp.Findings) > 0 {
		env.TopFinding = cp.Findings[0]
	}
	n.runHook("on-capture", cmp.Or(t.OnCapture, n.cfg.OnCapture), env)
	if n.cfg.Uploads != nil {
		it, err := UploadItem(res.Dir, t.Tags)
		if err != nil {
			n.log.Error("the capture cannot be queued for upload; it stays on disk", "dir", res.Dir, "err", err)
			return
		}
		n.ups <- it
	}
}

func (n *Notifier) env(t Target, event string, stall time.Duration) hook.Env {
	return hook.Env{Event: event, PID: t.PID, Process: t.Process, Stall: stall, Service: t.Service, Host: n.cfg.Host}
}

func (n *Notifier) runHook(name, cmd string, env hook.Env) {
	if n.cfg.Hooks != nil && cmd != "" {
		n.cfg.Hooks.Start(name, cmd, env)
	}
}

// findings are a capture's findings in a line each, most severe first.
func findings(res *model.Result) []string {
	var out []string
	for _, f := range res.Info.Findings {
		out = append(out, f.Summary)
	}
	return out
}

func topFinding(res *model.Result) string {
	if f, ok := res.TopFinding(); ok {
		return f.Summary
	}
	return ""
}

// itemData is what a queued upload keeps beside its capture directory.
type itemData struct {
	// Tags are the target's own at the time of the capture.
	Tags []string `json:"tags,omitempty"`
	// File is set for one profile file (a continuous profile's period,
	// whose path is the item's key): what event.json says of it.
	File *fileData `json:"file,omitempty"`
}

// fileData is what the upload of one profile file needs beside it.
type fileData struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Runtime  string    `json:"runtime,omitempty"`
	Hostname string    `json:"hostname,omitempty"`
	Kernel   string    `json:"kernel,omitempty"`
}

// FileItem is the spool item of one profile file's upload (a continuous
// profile's period): its absolute path, size, and what p says of it —
// its window, its tags (all of them: the target's and the profile's),
// its runtime and host. The file must stay until the upload is done
// (Pending says when).
func FileItem(path string, p upload.Profile) (spool.Item, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return spool.Item{}, err
	}
	st, err := os.Lstat(abs)
	if err != nil {
		return spool.Item{}, err
	}
	data, err := json.Marshal(itemData{Tags: p.Tags, File: &fileData{Start: p.Start, End: p.End, Runtime: p.Runtime, Hostname: p.Hostname, Kernel: p.Kernel}})
	if err != nil {
		return spool.Item{}, err
	}
	return spool.Item{Key: abs, Size: st.Size(), Data: data}, nil
}

// UploadItem is the spool item of a capture directory's upload: its
// absolute path, and its size (the profiles it will send).
func UploadItem(dir string, tags []string) (spool.Item, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return spool.Item{}, err
	}
	var size int64
	for _, name := range []string{capdir.FileProfile, capdir.FileThreads} {
		st, err := os.Lstat(filepath.Join(abs, name))
		switch {
		case err == nil:
			size += st.Size()
		case !errors.Is(err, fs.ErrNotExist):
			return spool.Item{}, err
		}
	}
	data, err := json.Marshal(itemData{Tags: tags})
	if err != nil {
		return spool.Item{}, err
	}
	return spool.Item{Key: abs, Size: size, Data: data}, nil
}

// Deliver uploads queued captures through u: the spool's deliverer. A
// capture directory that is gone or unreadable is refused for good (not
// retryable); so is a profile the agent refuses.
func Deliver(u *upload.Uploader) spool.Deliver {
	return func(ctx context.Context, it spool.Item) error {
		var d itemData
		if len(it.Data) > 0 {
			if err := json.Unmarshal(it.Data, &d); err != nil {
				return permanent{fmt.Errorf("queued upload of %s: %w", it.Key, err)}
			}
		}
		if f := d.File; f != nil {
			p, err := upload.LoadFile(it.Key, upload.Profile{Start: f.Start, End: f.End, Tags: d.Tags, Runtime: f.Runtime, Hostname: f.Hostname, Kernel: f.Kernel})
			if err != nil {
				return permanent{err}
			}
			return u.Upload(ctx, p)
		}
		p, err := upload.Load(it.Key)
		if err != nil {
			return permanent{err}
		}
		p.Tags = append(d.Tags, p.Tags...)
		return u.Upload(ctx, p)
	}
}

// permanent is a failure no retry can fix.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Retryable is the spool's Retryable for Deliver's errors.
func Retryable(err error) bool {
	var p permanent
	if errors.As(err, &p) {
		return false
	}
	return upload.Retryable(err)
}

// UploadDir uploads a capture directory at once (stallwatch upload),
// trying again after 1 s, 2 s, 4 s … up to tries times in all while the
// failure may pass (upload.Retryable) and the agent cannot have it yet
// (not upload.Unanswered).
func UploadDir(ctx context.Context, u *upload.Uploader, dir string, tries int) error {
	p, err := upload.Load(dir)
	if err != nil {
		return err
	}
	wait := time.Second
	for try := 1; ; try++ {
		err = u.Upload(ctx, p)
		if err == nil || !upload.Retryable(err) || upload.Unanswered(err) || try >= tries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}
