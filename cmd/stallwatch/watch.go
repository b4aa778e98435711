package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/internal/child"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/preflight"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/notify/alert"
	"github.com/stallwatch/stallwatch/watch"
	"github.com/stallwatch/stallwatch/watchdog"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd"
)

func watchCommand(g *globals) *cli.Command {
	f := &watchFlags{}
	return &cli.Command{
		Name:    "watch",
		Summary: "watch a process's heartbeat and capture it when it stalls",
		Usage:   "(-p PID | -- CMD [ARGS...]) HEARTBEAT... [flags]",
		Help:    watchHelp,
		Flags:   f.declare,
		Args:    cli.Program,
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return runWatch(ctx, inv, f, g)
		},
	}
}

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
counted from its first beat: a file, a metric or an endpoint from the first
beat the target gives, --heartbeat-proc from the start of watching):

  A file the target touches or replaces (inotify, plus a stat poll for NFS):
    stallwatch watch --heartbeat-file /run/app/heartbeat --pid 4242
  In --heartbeat-file and --heartbeat-http, {pid} is the target's pid and
  {root} its root directory (/proc/PID/root: a container's files), as in
  the daemon's rules; with '-- CMD', the child's:
    stallwatch watch --heartbeat-file '/tmp/app-{pid}.beat' -- ./app

  A DogStatsD metric: stallwatch receives the target's metrics in place of
  the agent, forwards every datagram unchanged to --forward, and a datagram
  with a metric matching --metric is a beat. With '-- CMD' the child gets
  DD_DOGSTATSD_URL pointing at stallwatch:
    stallwatch watch --heartbeat-statsd udp://127.0.0.1:18125 \
        --metric 'myapp.exporter.*' --forward udp://127.0.0.1:8125 -- julia server.jl

  An HTTP endpoint: a 2xx answer within --http-timeout is a beat:
    stallwatch watch --heartbeat-http http://127.0.0.1:8080/health --pid 4242

  The process's own progress: any CPU time or context switch of its
  threads. Catches a process frozen outright with no help from it, even one
  frozen before watching began; a target idle for longer than --stall-after
  looks frozen too:
    stallwatch watch --heartbeat-proc --stall-after 30s --pid 4242

A stall is declared at most stall-after plus a poll after the last beat:
a file and the process's progress are looked at every tenth of
--stall-after (20ms to 1s), an endpoint every --http-interval, the tap's
datagrams within 100ms; the deadline itself may wait a hundredth of
--stall-after (at most 100ms), so that many targets wake up together.

Alerts, uploads and hooks (each is off unless configured):

  With a DogStatsD address (--statsd, else DD_DOGSTATSD_URL, else
  DD_AGENT_HOST, else the agent's socket when it exists) a stall sends, the
  moment it is found, an error event, the service check
  stallwatch.target.responsive (critical) and stallwatch.stall.active; the
  capture (with its top findings) and the recovery follow in the same event
  thread; stallwatch.heartbeat.age is sent every 10 s.

  With an agent URL (--upload, else DD_TRACE_AGENT_URL, else
  DD_AGENT_HOST:8126, else the agent's APM socket when it exists) each
  capture goes to Datadog's profiler, beside the service's other profiles.
  An upload the agent cannot take now waits in OUT/.upload-queue, across
  restarts, and --keep spares its capture until it is sent:
    stallwatch watch --heartbeat-proc -p 4242 --statsd 127.0.0.1:8125 \
        --upload http://127.0.0.1:8126 --service bank --env prod

  Hooks run a command of yours after each capture or recovery, with the
  capture directory and the top finding in its environment:
    stallwatch watch --heartbeat-file /run/app.beat -p 4242 \
        --on-capture 'curl -fsS --data "$STALLWATCH_TOP_FINDING" "$WEBHOOK_URL"'

Signals: SIGUSR1 captures now (trigger "signal"), whatever the state;
requests that arrive during a capture make one more capture after it.
SIGINT and SIGTERM cut a capture in progress short, write it (within 5 s)
and exit; a second one exits at once.

Log lines (stderr, --log-format text or json) say each change of state:
waiting, healthy, stalled, capturing, cooldown, recovered, exited. If
stallwatch itself ran late (the host was suspended, or stallwatch was
starved of CPU) it re-arms instead of blaming the target.

With --heartbeat-statsd and no --forward, the target's metrics go on to
DD_DOGSTATSD_URL, else DD_AGENT_HOST:8125 (DD_DOGSTATSD_PORT), as the
Datadog client would have sent them.

Needs perf_event_open (root, CAP_PERFMON, or kernel.perf_event_paranoid
<= 1 for your own processes) and, for the snapshot, ptrace (CAP_SYS_PTRACE
or --no-ptrace).`

// watchFlags are the flags of `watch`.
type watchFlags struct {
	pid      int
	rule     ruleFlags
	output   outputFlags
	profiles profileStoreFlags
	datadog  datadogFlags
	hooks    hookFlags
}

func (f *watchFlags) declare(fs *cli.FlagSet) {
	declarePID(fs, &f.pid, "watch the running process; exit when it exits")
	f.rule.declare(fs)
	f.output.declare(fs, capture.DefaultOut)
	f.profiles.declare(fs)
	f.datadog.withStatsd, f.datadog.withQueue = true, true
	f.datadog.declare(fs)
	f.hooks.declare(fs)
}

func (f *watchFlags) check(inv *cli.Invocation) error {
	cmd := inv.Rest
	switch {
	case len(inv.Args) > 0:
		return cli.UsageErrorf("unexpected argument %q: a command to run goes after '--'", inv.Args[0])
	case f.pid == 0 && len(cmd) == 0:
		return cli.UsageErrorf("say what to watch: --pid PID or -- CMD [ARGS...]")
	case f.pid != 0 && len(cmd) > 0:
		return cli.UsageErrorf("--pid and a command (%q) exclude each other", cmd[0])
	case f.pid < 0:
		return cli.UsageErrorf("--pid %d: not a process id", f.pid)
	}
	if err := f.rule.check(inv.Flags.Changed); err != nil {
		return err
	}
	for _, c := range []interface{ check() error }{&f.output, &f.profiles, &f.datadog, &f.hooks} {
		if err := c.check(); err != nil {
			return err
		}
	}
	return nil
}

// ddEnv fills from Datadog's environment the forward address the flags
// leave empty: where the Datadog client would have sent the metrics
// (DD_DOGSTATSD_URL, else DD_AGENT_HOST and DD_DOGSTATSD_PORT; never the
// agent's socket, which the client does not look for). An address there
// that is not DogStatsD's is a usage error, as the flag's would be.
func (f *watchFlags) ddEnv(getenv func(string) string) error {
	h := &f.rule.heartbeat
	if h.statsdAddr == "" || h.forward != "" {
		return nil
	}
	var err error
	h.forward, _, err = alert.Agent.Resolve("", getenv, func(string) bool { return false })
	if err != nil {
		return cli.UsageErrorf("%v", err)
	}
	return nil
}

// needs is what watching asks of the machine. A child is not running yet:
// permissions are checked on stallwatch, whose user it will have.
func (f *watchFlags) needs() preflight.Needs {
	n := preflight.Needs{Verb: "watch", PID: f.pid, Snapshot: true, Out: f.output.out, OutFlag: "--out"}
	f.rule.needs(&n)
	return n
}

// settings are how the flags watch the target, its captures written
// under --out and queued for upload on stack.
func (f *watchFlags) settings(stack *notify.Stack) watch.Settings {
	s := f.rule.settings()
	f.output.apply(&s.Capture)
	if stack.Queue != nil {
		s.Capture.Uploads = stack.Queue
	}
	return s
}

// notifyOptions are the alerts, uploads and hooks the flags ask for.
func (f *watchFlags) notifyOptions(log *slog.Logger) notify.Options {
	o := f.datadog.options(filepath.Join(f.output.out, notify.QueueDirName), log)
	f.hooks.apply(&o)
	return o
}

// stackGrace is how long stallwatch gives its last uploads and hooks when
// it ends.
const stackGrace = 5 * time.Second

// runWatch runs `stallwatch watch`. In `-- CMD` mode it ends with the
// child's status (an exitStatus error when it is not 0).
func runWatch(ctx context.Context, inv *cli.Invocation, f *watchFlags, g *globals) error {
	if err := f.check(inv); err != nil {
		return err
	}
	if err := f.ddEnv(os.Getenv); err != nil {
		return err
	}
	f.output.settle(inv.Flags.Changed, os.Getenv)
	stopSIGPIPE := ignoreSIGPIPE()
	defer stopSIGPIPE()
	log := g.logger(inv.Stderr, "", false)
	if err := startChecks(log, f.needs()); err != nil {
		return err
	}

	stack, err := notify.Setup(f.notifyOptions(log))
	if err != nil {
		return err
	}
	defer stack.Close(stackGrace)
	sources, proxy, err := f.sources(log)
	if err != nil {
		return err
	}
	if proxy != nil {
		defer proxy.Close()
	}
	// SIGUSR1 and, for a child, SIGINT/SIGTERM are ours from here on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	if len(inv.Rest) == 0 {
		err := watchTarget(ctx, f, f.pid, sources, stack, nil, sigs, log)
		if errors.Is(err, watch.ErrTargetExited) {
			return &targetExitedError{pid: f.pid}
		}
		return err
	}
	var env []string
	if proxy != nil {
		env = append(env, "DD_DOGSTATSD_URL="+proxy.Addr())
	}
	kid, err := child.Start(child.Config{Args: inv.Rest, Env: env, Logger: log})
	if err != nil {
		return err
	}
	if err := watchTarget(ctx, f, kid.Pid, sources, stack, kid, sigs, log); err != nil {
		if errors.Is(err, watch.ErrTargetExited) {
			// It exited before it could be watched: its status is
			// the answer.
			log.Warn("the target exited before stallwatch could watch it")
			return statusOf(kid.Wait(), log)
		}
		select {
		case <-kid.Done():
			log.Warn("the target exited before stallwatch could watch it", "err", err)
			return statusOf(kid.Wait(), log)
		default:
			kid.Stop(childGrace) // we cannot watch it: do not leave it running unwatched
			return err
		}
	}
	return statusOf(kid.Wait(), log)
}

// childGrace is how long a child stallwatch cannot watch has to end after
// SIGTERM before it is killed.
const childGrace = 3 * time.Second

// statusOf passes a child's exit status on as stallwatch's, and says it
// (the watchdog said the exit itself, once).
func statusOf(st child.Status, log *slog.Logger) error {
	if st.Signal != 0 {
		log.Info("exiting as the command did: killed by a signal", "signal", st.Signal, "exit_code", st.ExitCode())
	} else {
		log.Info("exiting with the command's status", "exit_code", st.ExitCode())
	}
	if code := st.ExitCode(); code != 0 {
		return exitStatus(code)
	}
	return nil
}

// sources builds the heartbeats that do not need the target's pid: the
// DogStatsD proxy binds its socket here, before a child starts, so that
// the child is told its address.
func (f *watchFlags) sources(log *slog.Logger) ([]watchdog.Source, *dogstatsd.Proxy, error) {
	h := &f.rule.heartbeat
	var srcs []watchdog.Source
	var proxy *dogstatsd.Proxy
	if h.statsdAddr != "" {
		var err error
		proxy, err = dogstatsd.Listen(dogstatsd.Config{
			Listen: h.statsdAddr, Forward: h.forward, Metric: h.metric, Tags: h.metricTags, Logger: log,
		})
		if err != nil {
			return nil, nil, err
		}
		srcs = append(srcs, proxy)
	}
	return srcs, proxy, nil
}

// watchTarget watches pid (package watch) until it exits or a signal
// stops it. A flight recorder or a continuous profile that cannot start
// ends the watch: it would be found missing only at the stall.
func watchTarget(ctx context.Context, f *watchFlags, pid int, sources []watchdog.Source, stack *notify.Stack, kid *child.Process, sigs <-chan os.Signal, log *slog.Logger) error {
	t := stack.Target(pid)
	cfg := watch.Config{
		PID: pid, Settings: f.settings(stack), Sources: sources, Process: t.Process, Tags: t.Tags,
		Events: stack.For(t), Logger: log, AbandonHint: "signal again to leave it",
	}
	if f.rule.profile.on() {
		prof, err := f.profiler(stack, log)
		if err != nil {
			return err
		}
		defer prof.Close()
		cfg.Profiler, cfg.ProfileBegun = prof, f.profileBegun(stack, log)
	}
	w, err := watch.New(cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Open(); err != nil {
		return err
	}
	log.Info("watching", "pid", pid, "heartbeats", w.Heartbeats(), "out", f.output.out)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Signals are relayed until the child is reaped: one that ignores
	// the first SIGTERM gets the next.
	relayCtx, stopRelay := context.WithCancel(context.Background())
	defer stopRelay()
	go relaySignals(relayCtx, sigs, w, kid, stop, log)
	err = w.Run(runCtx)
	if kid != nil {
		kid.Wait() // relaying goes on meanwhile
		if errors.Is(err, watch.ErrTargetExited) {
			err = nil // the child's status says how it ended
		}
	}
	return err
}

// profiler is the continuous profile's schedule: its files under --out,
// its uploads through the queue; closing it (after the watch, which cuts
// the last period) applies the files' bounds.
func (f *watchFlags) profiler(stack *notify.Stack, log *slog.Logger) (*continuous.Profiler, error) {
	cfg := f.profiles.config(f.output.out, stack.Queue, log)
	cfg.Period = f.rule.profile.period
	return continuous.Start(cfg)
}

// profileBegun says where the continuous profile goes once it began.
func (f *watchFlags) profileBegun(stack *notify.Stack, log *slog.Logger) func(dir string) {
	return func(dir string) {
		where := "files only (no agent)"
		if stack.Queue != nil {
			where = "files, and uploads through the queue"
		}
		p := &f.rule.profile
		log.Info("continuous profile on", "period", p.period, "freq", p.freq, "off_cpu", p.offCPU, "dir", dir, "to", where)
	}
}

// relaySignals turns SIGUSR1 into a capture and, for a child, passes
// SIGHUP, SIGINT and SIGTERM on to it (without a child, SIGHUP is logged
// and ignored: it must not end watch unseen) — but not a SIGINT while
// stallwatch is in its terminal's foreground: the terminal sent Ctrl-C to
// the whole group, the child included, and a second one would be the
// child's "force quit". SIGINT and SIGTERM also stop
// the watchdog (without a child, main's context does that too), which
// finishes a capture in progress first; a second one leaves it unfinished.
func relaySignals(ctx context.Context, sigs <-chan os.Signal, wd *watch.Watch, kid *child.Process, stop func(), log *slog.Logger) {
	stopping := false
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			switch s {
			case syscall.SIGUSR1:
				wd.CaptureNow() // the watchdog logs what it does with it
				continue
			case syscall.SIGHUP:
				if kid != nil {
					log.Info("SIGHUP: passed on to the command")
					kid.Signal(s)
				} else {
					log.Info("SIGHUP: watch has no configuration to read again; going on (stallwatch daemon reloads its rules on SIGHUP)")
				}
				continue
			}
			if kid != nil {
				if s == syscall.SIGINT && child.InForeground() {
					log.Info("SIGINT from the terminal: the target has it too", "pid", kid.Pid)
				} else {
					kid.Signal(s)
				}
			}
			if stopping {
				wd.Abandon()
				continue
			}
			stopping = true
			log.Info("stopping", "signal", s) // the watchdog says whether a capture is finished first
			stop()
		}
	}
}
