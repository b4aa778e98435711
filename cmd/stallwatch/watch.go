package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/watchdog"
)

func init() {
	register(command{
		name:    "watch",
		summary: "watch a process's heartbeat and capture it when it stalls",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			code, err := watch(ctx, args, stderr)
			if err == nil && code != 0 {
				// `-- CMD` mode ends with the child's status; every
				// resource was released by watch's defers.
				os.Exit(code)
			}
			return err
		},
	})
}

const watchUsage = "stallwatch watch (--pid PID | -- CMD [ARGS...]) HEARTBEAT... [CAPTURE] [OUTPUT]"

const watchHelp = `
Watches a heartbeat that the target gives off. When it stops for
--stall-after, stallwatch samples every thread of the target at --freq for
--capture-for (on-CPU and off-CPU stacks with kernel and JIT frames), takes
a snapshot of every thread, adds the background samples of the last
--history, and writes a capture directory under --out: profile.pb.gz,
threads.pb.gz (go tool pprof opens both), report.txt, report.html and
capture.json. A stall that lasts is captured again every --recapture-after,
at most --max-captures times an hour; when beats resume, the stall's length
is logged and written into its captures' capture.json.

The target is a running process (--pid: stallwatch exits when it exits) or
a command started as a child after '--' (stallwatch forwards SIGINT and
SIGTERM to it and exits with its status).

Heartbeats (at least one; a stall is any of them silent for --stall-after,
counted from its first beat, so nothing stalls before the first beat):

  A file the target touches or replaces (inotify, plus a stat poll for NFS):
    stallwatch watch --heartbeat-file /run/app/heartbeat --pid 4242

  A DogStatsD metric: stallwatch receives the target's metrics in place of
  the agent, forwards every datagram unchanged to --forward, and a datagram
  with a metric matching --metric is a beat. With '-- CMD' the child gets
  DD_DOGSTATSD_URL pointing at stallwatch:
    stallwatch watch --heartbeat-statsd udp://127.0.0.1:18125 \
        --metric 'myapp.exporter.*' --forward udp://127.0.0.1:8125 -- julia server.jl

  An HTTP endpoint: a 2xx answer within --http-timeout is a beat:
    stallwatch watch --heartbeat-http http://127.0.0.1:8080/health --pid 4242

  The process's own progress: any CPU time or context switch of its
  threads. Catches a process frozen outright with no help from it; a target
  idle for longer than --stall-after looks frozen too:
    stallwatch watch --heartbeat-proc --stall-after 30s --pid 4242

Signals: SIGUSR1 captures now (trigger "signal"), whatever the state.
SIGINT and SIGTERM finish a capture in progress (cut short, still valid)
and exit.

Log lines (stderr, --log-format text or json) say each change of state:
waiting, healthy, stalled, capturing, cooldown, recovered, exited. If
stallwatch itself ran late (the host was suspended, or stallwatch was
starved of CPU) it re-arms instead of blaming the target.

Datadog's environment fills what flags leave empty: --forward from
DD_DOGSTATSD_URL, else DD_AGENT_HOST:8125 (DD_DOGSTATSD_PORT); --statsd
likewise; --upload from DD_TRACE_AGENT_URL; --service, --env and --tags from
DD_SERVICE, DD_ENV and DD_TAGS. Alerts (--statsd, --tags) and upload
(--upload, --service, --env) are accepted but NOT YET IMPLEMENTED: they are
ignored with a warning.

Needs perf_event_open (root, CAP_PERFMON, or kernel.perf_event_paranoid
<= 1 for your own processes) and, for the snapshot, ptrace (CAP_SYS_PTRACE
or --no-ptrace).`

// watchFlags are the parsed flags of `watch`.
type watchFlags struct {
	pid int

	files        stringList
	statsdAddr   string
	metric       string
	metricTags   stringList
	forward      string
	httpURL      string
	httpTimeout  time.Duration
	httpInterval time.Duration
	proc         bool
	stallAfter   time.Duration

	captureFor     time.Duration
	freq           int
	baselineFreq   int
	history        time.Duration
	noOffCPU       bool
	noKernel       bool
	noPtrace       bool
	maxCaptures    int
	recaptureAfter time.Duration

	out       string
	keep      int
	alertAddr string
	tags      string
	upload    string
	service   string
	env       string
	logFormat string

	set map[string]bool // flags given on the command line
}

// stringList is a flag that may be repeated.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func parseWatchFlags(args []string, stderr io.Writer) (*watchFlags, []string, error) {
	f := &watchFlags{}
	fs := newFlagSet("watch", watchUsage, watchHelp, stderr)
	fs.IntVar(&f.pid, "pid", 0, "watch the running process `PID` (exit when it exits)")

	fs.Var(&f.files, "heartbeat-file", "heartbeat: a file whose mtime, size or content changes at each beat (`PATH`; repeatable)")
	fs.StringVar(&f.statsdAddr, "heartbeat-statsd", "", "heartbeat: receive DogStatsD on `ADDR` (udp://127.0.0.1:8125 or unix:///path; a UDP address without host is loopback)")
	fs.StringVar(&f.metric, "metric", "", "with --heartbeat-statsd: metric name `GLOB` that is a beat ('*' any run, '?' one char; default any metric)")
	fs.Var(&f.metricTags, "metric-tag", "with --heartbeat-statsd: the metric must also carry tag `k:v` (repeatable)")
	fs.StringVar(&f.forward, "forward", "", "with --heartbeat-statsd: forward every datagram to `ADDR` (default $DD_DOGSTATSD_URL, else $DD_AGENT_HOST:8125, else none)")
	fs.StringVar(&f.httpURL, "heartbeat-http", "", "heartbeat: a 2xx answer from GET `URL`")
	fs.DurationVar(&f.httpTimeout, "http-timeout", 2*time.Second, "with --heartbeat-http: the answer must come within this `DUR`")
	fs.DurationVar(&f.httpInterval, "http-interval", time.Second, "with --heartbeat-http: time between probes")
	fs.BoolVar(&f.proc, "heartbeat-proc", false, "heartbeat: any CPU time or context switch of the target's threads")
	fs.DurationVar(&f.stallAfter, "stall-after", 10*time.Second, "a heartbeat silent this long is a stall")

	fs.DurationVar(&f.captureFor, "capture-for", capture.DefaultCaptureFor, "sample this long at --freq when a stall starts")
	fs.IntVar(&f.freq, "freq", capture.DefaultFreq, "sampling rate of a capture, `HZ` per thread")
	fs.IntVar(&f.baselineFreq, "baseline-freq", capture.DefaultBaselineFreq, "background sampling rate between captures, `HZ` (0: off, no history)")
	fs.DurationVar(&f.history, "history", capture.DefaultHistory, "background samples from before the trigger that go into a capture")
	fs.BoolVar(&f.noOffCPU, "no-offcpu", false, "do not sample off-CPU (blocked) time")
	fs.BoolVar(&f.noKernel, "no-kernel", false, "leave kernel frames out of stacks")
	fs.BoolVar(&f.noPtrace, "no-ptrace", false, "never stop the target's threads (the snapshot then has no user stacks of blocked threads)")
	fs.IntVar(&f.maxCaptures, "max-captures", 6, "at most `N` stall captures an hour (0: log stalls, capture only on SIGUSR1)")
	fs.DurationVar(&f.recaptureAfter, "recapture-after", 5*time.Minute, "capture a stall that lasts again after this long")

	fs.StringVar(&f.out, "out", capture.DefaultOut, "write capture directories under `DIR`")
	fs.IntVar(&f.keep, "keep", 0, "keep only the `N` newest capture directories (0: all)")
	fs.StringVar(&f.alertAddr, "statsd", "", "send DogStatsD alerts to `ADDR` (not yet implemented)")
	fs.StringVar(&f.tags, "tags", "", "tags `k:v,...` on alerts and uploads (not yet implemented)")
	fs.StringVar(&f.upload, "upload", "", "upload profiles to the Datadog agent at `URL` (not yet implemented)")
	fs.StringVar(&f.service, "service", "", "service name for uploads (not yet implemented)")
	fs.StringVar(&f.env, "env", "", "environment for uploads (not yet implemented)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log lines as `text` or json")

	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := f.check(fs.Args()); err != nil {
		return nil, nil, err
	}
	return f, fs.Args(), nil
}

func (f *watchFlags) check(cmd []string) error {
	switch {
	case f.pid == 0 && len(cmd) == 0:
		return usagef("say what to watch: --pid PID or -- CMD [ARGS...]")
	case f.pid != 0 && len(cmd) > 0:
		return usagef("--pid and a command (%q) exclude each other", cmd[0])
	case f.pid < 0:
		return usagef("--pid %d: not a process id", f.pid)
	case len(f.files) == 0 && f.statsdAddr == "" && f.httpURL == "" && !f.proc:
		return usagef("no heartbeat: give --heartbeat-file, --heartbeat-statsd, --heartbeat-http or --heartbeat-proc")
	case f.stallAfter <= 0:
		return usagef("--stall-after %v: must be positive", f.stallAfter)
	case f.captureFor <= 0 || f.recaptureAfter <= 0 || f.history < 0:
		return usagef("--capture-for and --recapture-after must be positive, --history not negative")
	case f.freq <= 0 || f.baselineFreq < 0:
		return usagef("--freq must be positive and --baseline-freq not negative")
	case f.maxCaptures < 0 || f.keep < 0:
		return usagef("--max-captures and --keep cannot be negative")
	case f.logFormat != "text" && f.logFormat != "json":
		return usagef("--log-format %q: want text or json", f.logFormat)
	case f.statsdAddr == "" && (f.metric != "" || len(f.metricTags) > 0 || f.forward != ""):
		return usagef("--metric, --metric-tag and --forward go with --heartbeat-statsd")
	case f.httpURL == "" && (f.set["http-timeout"] || f.set["http-interval"]):
		return usagef("--http-timeout and --http-interval go with --heartbeat-http")
	case f.httpURL != "" && f.httpTimeout <= 0:
		return usagef("--http-timeout must be positive")
	}
	return nil
}

func (f *watchFlags) logger(stderr io.Writer) *slog.Logger {
	if f.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(stderr, nil))
	}
	return slog.New(slog.NewTextHandler(stderr, nil))
}

// ddEnv fills from Datadog's environment what the flags leave empty
// (the README, "Datadog"): the forward and alert addresses, upload URL, service, env
// and tags.
func (f *watchFlags) ddEnv(getenv func(string) string) {
	agent := getenv("DD_DOGSTATSD_URL")
	if agent == "" {
		if host := getenv("DD_AGENT_HOST"); host != "" {
			port := getenv("DD_DOGSTATSD_PORT")
			if port == "" {
				port = "8125"
			}
			agent = net.JoinHostPort(host, port)
		}
	}
	if f.statsdAddr != "" && f.forward == "" {
		f.forward = agent
	}
	if f.alertAddr == "" {
		f.alertAddr = agent
	}
	if f.upload == "" {
		if u := getenv("DD_TRACE_AGENT_URL"); u != "" {
			f.upload = u
		} else if host := getenv("DD_AGENT_HOST"); host != "" {
			f.upload = "http://" + net.JoinHostPort(host, "8126")
		}
	}
	for _, kv := range []struct {
		dst *string
		env string
	}{{&f.service, "DD_SERVICE"}, {&f.env, "DD_ENV"}, {&f.tags, "DD_TAGS"}} {
		if *kv.dst == "" {
			*kv.dst = getenv(kv.env)
		}
	}
}

// warnUnimplemented says which flags given are ignored for now.
func (f *watchFlags) warnUnimplemented(log *slog.Logger) {
	for _, name := range []string{"statsd", "tags", "upload", "service", "env"} {
		if f.set[name] {
			log.Warn("flag not yet implemented; ignored", "flag", "--"+name)
		}
	}
}

// watch runs `stallwatch watch`; code is the child's exit status in
// `-- CMD` mode.
func watch(ctx context.Context, args []string, stderr io.Writer) (code int, err error) {
	f, cmdArgs, err := parseWatchFlags(args, stderr)
	if err != nil {
		return 0, err
	}
	f.ddEnv(os.Getenv)
	log := f.logger(stderr)
	f.warnUnimplemented(log)

	sources, proxy, err := f.sources(log)
	if err != nil {
		return 0, err
	}
	if proxy != nil {
		defer proxy.Close()
	}
	// SIGUSR1 and, for a child, SIGINT/SIGTERM are ours from here on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var child *childProc
	pid := f.pid
	if len(cmdArgs) > 0 {
		if child, err = startChild(cmdArgs, proxy, log); err != nil {
			return 0, err
		}
		pid = child.pid
		defer child.reap(log)
	} else if !procfs.Alive(pid) {
		return 0, fmt.Errorf("no process %d", pid)
	}
	if f.proc {
		sources = append(sources, &watchdog.Progress{PID: pid, Interval: watchdog.PollInterval(f.stallAfter)})
	}

	code, err = watchTarget(ctx, f, pid, sources, child, sigs, log)
	if child != nil && err != nil {
		select {
		case <-child.done:
			// It exited before it could be watched: its status is
			// the answer.
			log.Warn("the target exited before stallwatch could watch it", "err", err)
			return child.wait(log), nil
		default:
			child.abandon(log) // we cannot watch it: do not leave it running unwatched
		}
	}
	return code, err
}

// sources builds the heartbeats that do not need the target's pid. The
// DogStatsD proxy binds its socket here, before a child starts.
func (f *watchFlags) sources(log *slog.Logger) ([]watchdog.Source, *watchdog.StatsdProxy, error) {
	var srcs []watchdog.Source
	poll := watchdog.PollInterval(f.stallAfter)
	for _, p := range f.files {
		srcs = append(srcs, &watchdog.File{Path: p, Poll: poll})
	}
	if f.httpURL != "" {
		srcs = append(srcs, &watchdog.HTTP{URL: f.httpURL, Interval: f.httpInterval, Timeout: f.httpTimeout})
	}
	var proxy *watchdog.StatsdProxy
	if f.statsdAddr != "" {
		var err error
		proxy, err = watchdog.ListenStatsd(watchdog.StatsdConfig{
			Listen: f.statsdAddr, Forward: f.forward, Metric: f.metric, Tags: f.metricTags, Logger: log,
		})
		if err != nil {
			return nil, nil, err
		}
		srcs = append(srcs, proxy)
	}
	return srcs, proxy, nil
}

// watchTarget opens the capture session and runs the watchdog until the
// target exits or a signal stops it.
func watchTarget(ctx context.Context, f *watchFlags, pid int, sources []watchdog.Source, child *childProc, sigs <-chan os.Signal, log *slog.Logger) (int, error) {
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.String()
	}
	sess, err := capture.Open(capture.Config{
		PID: pid, Out: f.out, Freq: f.freq, BaselineFreq: f.baselineFreq, NoFlightRecorder: f.baselineFreq == 0,
		CaptureFor: f.captureFor, History: f.history, NoOffCPU: f.noOffCPU, NoKernel: f.noKernel, NoPtrace: f.noPtrace, Snapshot: true,
		Keep: f.keep, Heartbeat: strings.Join(names, ", "), Logger: log,
		ParentReapsAfterExit: child != nil, // startChild reaps only after exit
	})
	if err != nil {
		return 0, err
	}
	defer func() {
		if err := sess.Close(); err != nil {
			log.Warn("closing the capture session", "err", err)
		}
	}()
	// Reading the target's symbols left garbage behind; a watchdog that
	// may idle for days should not keep its pages.
	debug.FreeOSMemory()
	wd, err := watchdog.New(watchdog.Config{
		PID: pid, Sources: sources, StallAfter: f.stallAfter, RecaptureAfter: f.recaptureAfter,
		MaxCaptures: f.maxCaptures, Capturer: sess, Logger: log,
	})
	if err != nil {
		return 0, err
	}
	log.Info("watching", "pid", pid, "heartbeats", strings.Join(names, ", "), "out", f.out)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Signals are relayed until the child is reaped: one that ignores
	// the first SIGTERM gets the next.
	relayCtx, stopRelay := context.WithCancel(context.Background())
	defer stopRelay()
	go relaySignals(relayCtx, sigs, wd, child, stop, log)
	err = wd.Run(runCtx)
	switch {
	case errors.Is(err, watchdog.ErrTargetExited):
		err = nil
	case err != nil:
		return 0, err
	}
	if child == nil {
		return 0, nil
	}
	return child.wait(log), nil
}

// relaySignals turns SIGUSR1 into a capture and, for a child, passes
// SIGINT and SIGTERM on to it; those two also stop the watchdog (without a
// child, main's context does that too).
func relaySignals(ctx context.Context, sigs <-chan os.Signal, wd *watchdog.Watchdog, child *childProc, stop func(), log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				log.Info("SIGUSR1: capturing now")
				wd.CaptureNow()
				continue
			}
			if child != nil {
				child.signal(s, log)
			}
			stop()
		}
	}
}

// childProc is the target started by `watch -- CMD`.
type childProc struct {
	cmd    *exec.Cmd
	pid    int
	done   chan struct{}
	err    error
	reaped bool
}

// startChild starts cmd with stallwatch's stdio. With a DogStatsD
// heartbeat, DD_DOGSTATSD_URL sends the child's metrics through the proxy.
func startChild(args []string, proxy *watchdog.StatsdProxy, log *slog.Logger) (*childProc, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	if proxy != nil {
		cmd.Env = append(cmd.Env, "DD_DOGSTATSD_URL="+proxy.Addr())
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	c := &childProc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		// Reap only once the child has exited: a wait for our own child
		// also reports the ptrace stops the snapshot makes of its main
		// thread, and cmd.Wait would take one for the child stopping.
		waitExited(c.pid)
		c.err = cmd.Wait()
		close(c.done)
	}()
	log.Info("started", "pid", c.pid, "cmd", strings.Join(args, " "))
	return c, nil
}

// waitExited blocks until process pid has exited, without reaping it: a
// pidfd becomes readable on exit and never on a stop. Kernels without
// pidfd_open (before 5.3) return at once, and cmd.Wait waits as usual.
func waitExited(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}

func (c *childProc) signal(s os.Signal, log *slog.Logger) {
	log.Info("forwarding signal to the target", "signal", s, "pid", c.pid)
	if err := c.cmd.Process.Signal(s); err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Warn("forwarding signal", "signal", s, "err", err)
	}
}

// wait waits for the child and returns its status as a shell would: the
// exit code, or 128+N when signal N killed it.
func (c *childProc) wait(log *slog.Logger) int {
	select {
	case <-c.done:
	default:
		log.Info("waiting for the target to exit", "pid", c.pid)
		<-c.done
	}
	c.reaped = true
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) {
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		log.Info("target killed by a signal", "pid", c.pid, "signal", ws.Signal())
		return 128 + int(ws.Signal())
	}
	log.Info("target exited", "pid", c.pid, "status", ee.ExitCode())
	return ee.ExitCode()
}

// abandon ends a child that stallwatch cannot watch after all (the capture
// session could not open): SIGTERM, then SIGKILL after a grace period.
func (c *childProc) abandon(log *slog.Logger) {
	if c.reaped {
		return
	}
	log.Warn("stopping the target: stallwatch cannot watch it", "pid", c.pid)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(3 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.reaped = true
}

// reap makes sure no zombie is left, whatever path watch took.
func (c *childProc) reap(log *slog.Logger) {
	if !c.reaped {
		c.wait(log)
	}
}
