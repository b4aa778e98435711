package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/notify/alert"
	"github.com/stallwatch/stallwatch/notify/datadog"
	"github.com/stallwatch/stallwatch/notify/hook"
	"github.com/stallwatch/stallwatch/notify/spool"
	"github.com/stallwatch/stallwatch/notify/upload"
	"github.com/stallwatch/stallwatch/runtimes"
)

// QueueDirName is the upload queue's directory under --out.
const QueueDirName = ".upload-queue"

// Options are what the user asked for: flags, with Datadog's environment
// (DD_DOGSTATSD_URL, DD_AGENT_HOST, DD_DOGSTATSD_PORT, DD_TRACE_AGENT_URL,
// DD_TRACE_AGENT_PORT, DD_SERVICE, DD_ENV, DD_VERSION, DD_TAGS) filling
// what they leave empty.
type Options struct {
	Statsd  string // --statsd
	Upload  string // --upload
	Tags    string // --tags (DD_TAGS when empty)
	Service string // --service (DD_SERVICE)
	Env     string // --env (DD_ENV)
	Version string // DD_VERSION
	// NoAlerts and NoUploads turn alerts or uploads off whatever the
	// environment says (--statsd off, --upload off; record sends no
	// alerts).
	NoAlerts, NoUploads bool

	// UploadTimeout bounds one upload request (upload's default when 0).
	UploadTimeout time.Duration

	OnCapture, OnRecover string
	HookTimeout          time.Duration
	// TargetHooks starts the hook runner even without OnCapture and
	// OnRecover: targets carry their own commands (Target.OnCapture, a
	// daemon rule's).
	TargetHooks bool

	// QueueDir is where uploads wait (OUT/.upload-queue); bounded by
	// MaxAge and MaxBytes (spool's defaults when 0).
	QueueDir string
	MaxAge   time.Duration
	MaxBytes int64

	Getenv func(string) string // default os.Getenv
	Logger *slog.Logger
}

// Stack is everything a stallwatch process acts with: one of each, for
// every target it watches.
type Stack struct {
	*Notifier
	Alerts   *alert.Client
	Hooks    *hook.Runner
	Uploader *upload.Uploader // nil: uploads are not configured
	Queue    *spool.Spool     // nil likewise
	Service  string

	log     *slog.Logger
	stopRun context.CancelFunc
	runDone chan struct{}
}

// Check says what is wrong with o (an address, a URL, a port of
// Datadog's environment) without starting anything: what Setup would
// refuse, for a configuration checked before it is used (daemon --check,
// SIGHUP).
func Check(o Options) error {
	_, err := o.resolve()
	return err
}

// Setup resolves o and starts what it asks for: alerts when a DogStatsD
// address is found, uploads (and their queue, delivering from now on)
// when an agent URL is, hooks when given. Each is logged once with where
// its address came from; what is not configured is silent.
func Setup(o Options) (*Stack, error) {
	r, err := o.resolve()
	if err != nil {
		return nil, err
	}
	log := r.log
	s := &Stack{Service: r.service, log: log}
	if s.Alerts, err = alert.New(alert.Config{Addr: r.addr, Tags: r.tags, Hostname: r.host, Logger: log}); err != nil {
		return nil, err
	}
	if r.addr != "" {
		log.Info("alerts on", "statsd", r.addr, "from", string(r.addrFrom), "tags", strings.Join(r.tags, ","))
	}
	if o.OnCapture != "" || o.OnRecover != "" || o.TargetHooks {
		s.Hooks = hook.New(hook.Config{Timeout: o.HookTimeout, Logger: log})
	}
	if r.url != "" {
		if s.Uploader, err = upload.New(upload.Config{URL: r.url, Tags: r.tags, Timeout: o.UploadTimeout, Logger: log}); err != nil {
			s.Alerts.Close()
			return nil, err
		}
		if o.QueueDir == "" {
			s.Alerts.Close()
			return nil, errors.New("notify: uploads need a queue directory")
		}
		s.Queue, err = spool.Open(spool.Config{Dir: o.QueueDir, MaxAge: o.MaxAge, MaxBytes: o.MaxBytes,
			Deliver: Deliver(s.Uploader), Retryable: Retryable, Unconfirmed: upload.Unanswered, Unreached: upload.Unsent, Logger: log})
		if err != nil {
			s.Alerts.Close()
			return nil, fmt.Errorf("upload queue: %w", err)
		}
		log.Info("uploads on", "agent", r.url, "from", string(r.urlFrom), "queue", o.QueueDir)
		ctx, cancel := context.WithCancel(context.Background())
		s.stopRun, s.runDone = cancel, make(chan struct{})
		go func() {
			defer close(s.runDone)
			s.Queue.Run(ctx)
		}()
	}
	s.Notifier = New(Config{Alerts: s.Alerts, Hooks: s.Hooks, OnCapture: o.OnCapture, OnRecover: o.OnRecover,
		Uploads: s.Queue, Host: r.host, Logger: log})
	return s, nil
}

// resolved is what Options come to once the environment filled them.
type resolved struct {
	log           *slog.Logger
	service, host string
	tags          []string
	addr, url     string
	addrFrom      datadog.Source
	urlFrom       datadog.Source
}

func (o *Options) resolve() (*resolved, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	r := &resolved{log: o.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	fill := func(v, env string) string {
		if v != "" {
			return v
		}
		return getenv(env)
	}
	var env, version string
	r.service, env, version = fill(o.Service, "DD_SERVICE"), fill(o.Env, "DD_ENV"), fill(o.Version, "DD_VERSION")
	r.host, _ = os.Hostname()
	r.tags = datadog.CommonTags(r.service, env, version, r.host, datadog.ParseTags(fill(o.Tags, "DD_TAGS")))
	var err error
	if !o.NoAlerts {
		if r.addr, r.addrFrom, err = alert.ResolveAddr(o.Statsd, getenv, nil); err != nil {
			return nil, err
		}
	}
	if !o.NoUploads {
		if r.url, r.urlFrom, err = upload.ResolveURL(o.Upload, getenv, nil); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ErrNoAgent is returned by NewUploader when no agent URL is configured.
var ErrNoAgent = errors.New("no Datadog agent: give --upload URL, or set DD_TRACE_AGENT_URL or DD_AGENT_HOST")

// NewUploader is the uploader o asks for, for uploads made at once
// (stallwatch upload), tagged as Setup's are.
func NewUploader(o Options) (*upload.Uploader, error) {
	r, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if r.url == "" {
		return nil, ErrNoAgent
	}
	return upload.New(upload.Config{URL: r.url, Tags: r.tags, Timeout: o.UploadTimeout, Logger: r.log})
}

// Target describes pid for alerts, hooks and uploads: its name as the
// uploads' process tag gives it (runtimes.ProcessName), and the service the
// options name.
func (s *Stack) Target(pid int) Target {
	comm, _ := procfs.Comm(pid, pid)
	exe, _ := procfs.Exe(pid)
	args, _ := procfs.Cmdline(pid)
	return Target{PID: pid, Process: runtimes.ProcessName(exe, args, comm), Service: s.Service}
}

// Close acts on the events handed over, gives the uploads queued up to
// grace to be delivered, runs no new hook and waits for those running up
// to grace, and releases everything. What is still queued stays on disk
// for the next stallwatch, and Close says so.
func (s *Stack) Close(grace time.Duration) {
	s.Notifier.Close()
	if s.Queue != nil {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		left := s.Queue.Drain(ctx)
		cancel()
		s.stopRun()
		<-s.runDone
		if left > 0 {
			s.log.Warn("uploads still queued; the next stallwatch with uploads on and the same --out sends them, or run stallwatch upload",
				"queued", left, "queue", s.Queue.Dir())
		}
		st := s.Queue.Stats()
		if st.Dropped+st.Refused+st.Unreadable > 0 {
			s.log.Warn("uploads not delivered", "dropped_for_bounds", st.Dropped, "refused", st.Refused, "unreadable_entries", st.Unreadable)
		}
		s.Queue.Close()
	}
	if s.Hooks != nil {
		s.Hooks.Close(grace)
	}
	s.Alerts.Close()
}
