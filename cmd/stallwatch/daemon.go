package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/daemon"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/preflight"
	"github.com/stallwatch/stallwatch/internal/sdnotify"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/notify/datadog"
)

func daemonCommand(g *globals) *cli.Command {
	f := &daemonFlags{}
	return &cli.Command{
		Name:    "daemon",
		Summary: "watch every process the rules of a configuration file select",
		Usage:   "[--config FILE] [flags]",
		Help:    daemonHelp,
		Flags:   f.declare,
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return runDaemon(ctx, inv, f, g)
		},
	}
}

const daemonHelp = `
Runs on a host as a service and watches every process that a rule of its
configuration selects, each as 'stallwatch watch' watches one: its own
heartbeats, stall detection and captures. A process that starts is watched
within seconds; one that exits is dropped.

The configuration is YAML. Host-wide settings (the flags below under Output
and Host, which the command line overrides) go at the top; rules go under
"rules:", each with a name, a "match:" that selects processes, and
settings named as watch's flags (heartbeat-tap, metric, stall-after,
max-captures, freq, no-ptrace ...); "defaults:" holds settings every rule
starts from:

  out: /var/lib/stallwatch/captures
  disk-quota: 2GiB
  max-concurrent-captures: 2
  defaults:
    stall-after: 30s
  rules:
    - name: julia
      match:
        cmdline: 'julia .*server\.jl'
      heartbeat-tap: udp://:8125
      metric: 'myapp.exporter.*'
    - name: api
      match:
        pidfile: /run/api.pid
      heartbeat-http: http://127.0.0.1:8080/health
      service: api
      on-capture: /etc/stallwatch/page-oncall
    - name: frozen-anything
      match:
        pod: 6f1c0a6e-2d3b-4a57-9b1e-0c8f2d7a9e11
      heartbeat-proc: true
      stall-after: 2m

Selectors (every one given must match): cmdline, exe and cgroup (regular
expressions), pidfile (read the moment it is written), container (an id or
its beginning), pod (a Kubernetes pod UID) and user. A cmdline pattern
never selects a wrapper (timeout, sudo, env, nohup, setsid, xargs, sh -c
…) whose arguments it matches: the program the wrapper runs is selected by
its own command line. In heartbeat-file and heartbeat-http, {pid} is the
process's pid and {root} its root directory (/proc/PID/root: a container's
files). The daemon's rules have no flight recorder unless they set
baseline-freq: with hundreds of processes, sampling each one between
stalls costs more than it tells. heartbeat-statsd (a proxy for one
process) is watch's; the daemon reads DogStatsD passively with
heartbeat-tap.

Alerts, uploads and hooks are watch's. Where they go (statsd, upload,
with Datadog's DD_* variables as watch reads them), the tags on
everything (tags, env), the upload queue's bounds and hook-timeout are
the host's: flags below or the top of the file. A rule names its
processes' service (service; else each is named by its process name),
adds its own tags (tags) and runs its own on-capture and on-recover
commands. The upload queue is OUT/.upload-queue.

Signals: SIGHUP reads the configuration again (one that cannot be used is
refused with its file, line and reason, and the rules in force go on);
SIGUSR1 captures every watched process; SIGTERM stops, finishing captures
in progress. 'stallwatch ctl' talks to the control socket: status, and a
capture of one process.

Under systemd (deploy/systemd/stallwatch.service): Type=notify readiness,
STATUS= lines and WatchdogSec= pings; captures and state go to
$STATE_DIRECTORY, the control socket to $RUNTIME_DIRECTORY. Exit codes: 0
stopped, 1 failure (Restart=on-failure restarts), 2 a configuration that
cannot be used, 3 a missing permission (neither helps to restart).`

// hostFlags are the daemon's host-wide settings: flags of `stallwatch
// daemon` and, by the same names, the top of its configuration file (the
// command line wins).
type hostFlags struct {
	output        outputFlags
	profiles      profileStoreFlags
	profileCPU    percent
	profileFDs    int
	diskQuota     byteSize
	maxConcurrent int
	maxPerHour    int
	scanInterval  time.Duration
	// Where alerts and uploads go, for every rule (a rule names its
	// service and adds tags: ruleNotifyFlags), and the hooks' bound.
	datadog datadogFlags
	hooks   hookFlags
}

// defaultDaemonOut is the daemon's --out outside systemd.
const defaultDaemonOut = "/var/lib/stallwatch/captures"

func (h *hostFlags) declare(fs *cli.FlagSet) {
	h.output.declare(fs, defaultDaemonOut)
	h.profiles.declare(fs)
	h.profileCPU = daemon.DefaultProfileCPU
	fs.Var(&h.profileCPU, "profile-max-cpu", "while it profiles continuously the daemon keeps its own CPU within `PCT` of one core (5%); over it, it profiles less: no off-CPU samples, then the rates halved down to 19 Hz, then the targets with the most threads not profiled (one log line, and a tag on the periods)").Default = "5%"
	fs.Int(&h.profileFDs, "profile-max-fds", 0, "and its file descriptors within `N` (0: a quarter of its hard RLIMIT_NOFILE): over it, the targets with the most threads are not profiled")
	fs.Group("Host")
	h.diskQuota = 1 << 30
	fs.Var(&h.diskQuota, "disk-quota", "keep the captures under --out within `SIZE` (1GiB, 500MiB; 0: no bound): the oldest go first").Default = "1GiB"
	fs.Int(&h.maxConcurrent, "max-concurrent-captures", 2, "at most `N` captures at once on the host; more wait for a slot")
	fs.Int(&h.maxPerHour, "max-captures-per-hour", 30, "at most `N` stall captures an hour on the host, all targets together (0: no bound)")
	fs.Duration(&h.scanInterval, "scan-interval", 2*time.Second, "look for new processes in /proc this often (the kernel's exec events, where stallwatch may read them, come at once)")
	h.datadog.withStatsd, h.datadog.withQueue, h.datadog.perTarget = true, true, true
	h.datadog.declare(fs)
	fs.Group("Hooks")
	h.hooks.declareTimeout(fs)
}

// notifySettings are the host's settings that notify.Setup reads once:
// a reload that changes them takes effect at a restart.
type notifySettings struct {
	datadog     datadogFlags
	hookTimeout time.Duration
}

func (h *hostFlags) notifySettings() notifySettings {
	return notifySettings{h.datadog, h.hooks.timeout}
}

// notifyOptions are the daemon's alerts, uploads and hooks: one of each
// for every target. DD_SERVICE and DD_VERSION are the daemon's own, not
// its targets': each rule names its service.
func (h *hostFlags) notifyOptions(out string, log *slog.Logger) notify.Options {
	o := h.datadog.options(filepath.Join(out, notify.QueueDirName), log)
	o.HookTimeout, o.TargetHooks = h.hooks.timeout, true
	o.Getenv = func(k string) string {
		if k == "DD_SERVICE" || k == "DD_VERSION" {
			return ""
		}
		return os.Getenv(k)
	}
	return o
}

func (h *hostFlags) check() error {
	switch {
	case h.maxConcurrent < 1:
		return cli.UsageErrorf("--max-concurrent-captures %d: at least 1", h.maxConcurrent)
	case h.maxPerHour < 0:
		return cli.UsageErrorf("--max-captures-per-hour %d: cannot be negative", h.maxPerHour)
	case h.scanInterval < 100*time.Millisecond:
		return cli.UsageErrorf("--scan-interval %v: at least 100ms", h.scanInterval)
	case h.profileCPU <= 0 || h.profileFDs < 0:
		return cli.UsageErrorf("--profile-max-cpu and --profile-max-fds must be positive (--profile-max-fds 0: a quarter of the hard limit)")
	}
	for _, c := range []interface{ check() error }{&h.output, &h.profiles, &h.datadog, &h.hooks} {
		if err := c.check(); err != nil {
			return err
		}
	}
	return nil
}

// ruleNotifyFlags are a daemon rule's part in alerts, uploads and hooks:
// watch's flags of the same names, set per rule.
type ruleNotifyFlags struct {
	service, tags string
	hooks         hookFlags
}

func (r *ruleNotifyFlags) declare(fs *cli.FlagSet) {
	fs.Group("Datadog")
	declareService(fs, &r.service)
	fs.String(&r.tags, "tags", "", "the rule's own tags `K:V,...` on its processes' alerts and uploads, beside the host's")
	fs.Group("Hooks")
	r.hooks.declareCommands(fs)
}

// notify is the rule's daemon.Notify: its service is one of its tags.
func (r *ruleNotifyFlags) notify() daemon.Notify {
	return daemon.Notify{Service: r.service, Tags: datadog.CommonTags(r.service, "", "", "", datadog.ParseTags(r.tags)),
		OnCapture: r.hooks.onCapture, OnRecover: r.hooks.onRecover}
}

// declareRule declares every setting a daemon rule takes.
func declareRule(fs *cli.FlagSet, r *ruleFlags, n *ruleNotifyFlags) {
	r.declare(fs)
	n.declare(fs)
}

// daemonFlags are the flags of `stallwatch daemon`.
type daemonFlags struct {
	config        string
	checkOnly     bool
	controlSocket string
	stateDir      string
	scanOnly      bool
	host          hostFlags
}

func (f *daemonFlags) declare(fs *cli.FlagSet) {
	fs.String(&f.config, "config", "/etc/stallwatch/stallwatch.yaml", "read the rules from `FILE`").Completes(cli.File)
	fs.Bool(&f.checkOnly, "check", "read and check the configuration, list the processes each rule selects now (warning of wrappers such as timeout or sh -c), and exit (0 when it can be used)")
	fs.String(&f.controlSocket, "control-socket", "/run/stallwatch/control.sock", "serve stallwatch ctl on the unix socket at `PATH` (under systemd, $RUNTIME_DIRECTORY/control.sock; \"\": none)").Completes(cli.File)
	fs.String(&f.stateDir, "state-dir", "/var/lib/stallwatch", "keep state across restarts in `DIR` (under systemd, $STATE_DIRECTORY)").Completes(cli.Dir)
	fs.Bool(&f.scanOnly, "scan-only", "find processes by scanning /proc only, never by the kernel's exec events")
	f.host.declare(fs)
}

// settle applies systemd's directories to the defaults not given.
func (f *daemonFlags) settle(changed func(string) bool, getenv func(string) string) {
	if !changed("state-dir") && getenv("STATE_DIRECTORY") != "" {
		f.stateDir = stateDir(getenv)
	}
	if !changed("control-socket") {
		if d, _, _ := strings.Cut(getenv("RUNTIME_DIRECTORY"), ":"); filepath.IsAbs(d) {
			f.controlSocket = filepath.Join(d, "control.sock")
		}
	}
	if !changed("out") && getenv("STATE_DIRECTORY") != "" {
		f.host.output.out = filepath.Join(stateDir(getenv), "captures")
	}
}

func runDaemon(ctx context.Context, inv *cli.Invocation, f *daemonFlags, g *globals) error {
	if len(inv.Positional()) > 0 {
		return cli.UsageErrorf("daemon takes no arguments; the rules come from --config")
	}
	if err := f.host.check(); err != nil {
		return err
	}
	f.settle(inv.Flags.Changed, os.Getenv)
	stopSIGPIPE := ignoreSIGPIPE()
	defer stopSIGPIPE()
	log := g.logger(inv.Stderr, "", false)
	load := func() (*daemon.Config, *hostFlags, error) { return checkedDaemonConfig(f.config, inv.Flags, f) }
	cfg, host, err := load()
	if err != nil {
		return err
	}
	if f.checkOnly {
		return describeConfig(inv, cfg)
	}
	if err := startChecks(log, daemonNeeds(cfg)); err != nil {
		return err
	}
	watchdogEvery, _ := sdnotify.Watchdog()
	notifier, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("not telling systemd our state", "err", err)
	}
	defer notifier.Close()
	// One DogStatsD client, uploader, queue and hook runner for every
	// target; closed after Run, when every target's last events are
	// handed over.
	stack, err := notify.Setup(host.notifyOptions(cfg.Out, log))
	if err != nil {
		return err
	}
	defer stack.Close(stackGrace)
	opts := daemon.Options{
		Logger: log, Notifier: notifier, WatchdogEvery: watchdogEvery / 2,
		StateDir: f.stateDir, ControlSocket: f.controlSocket, NoConnector: f.scanOnly,
		Events: stack.For,
	}
	if stack.Queue != nil {
		opts.Uploads = stack.Queue
	}
	// One schedule for the continuous profiles of every rule that asks
	// (idle while none does); its files' bounds are read at start.
	if opts.Profiles, err = continuous.Start(host.profiles.config(cfg.Out, stack.Queue, log)); err != nil {
		return err
	}
	defer opts.Profiles.Close()
	d, err := daemon.New(cfg, opts)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for {
		select {
		case err := <-done:
			return err
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				log.Info("SIGUSR1: capturing every watched process", "processes", d.CaptureAll())
				continue
			}
			reload(d, load, host.notifySettings(), notifier, log)
		}
	}
}

// reload reads the configuration again and puts it in force, or refuses
// it and keeps the one in force.
func reload(d *daemon.Daemon, load func() (*daemon.Config, *hostFlags, error), inForce notifySettings, n *sdnotify.Notifier, log *slog.Logger) {
	_ = n.Reloading()
	cfg, host, err := load()
	if err == nil {
		err = d.Reload(cfg)
	}
	if err == nil && host.notifySettings() != inForce {
		log.Warn("statsd, upload, tags, env, upload-max-age, upload-max-bytes and hook-timeout change when stallwatch restarts; the rules' service, tags and hooks changed now")
	}
	if err != nil {
		log.Error("SIGHUP: configuration refused; the rules in force go on", "err", err)
		_ = n.Ready("configuration refused (see the log); the rules in force go on")
		return
	}
	log.Info("SIGHUP: configuration read", "config", cfg.File, "rules", len(cfg.Rules))
}

// daemonNeeds is what the rules ask of the machine. The targets are not
// known at start and belong to other users: the capabilities that
// profiling them takes are required outright, and what watch would only
// warn about (no ptrace stops, no kernel function names) stops the daemon
// with exit status 3, since it runs unattended.
func daemonNeeds(cfg *daemon.Config) preflight.Needs {
	n := preflight.Needs{Verb: "run the daemon", Sample: true, Snapshot: true, Out: cfg.Out, OutFlag: "out",
		AnyProcess: []perms.Op{perms.SampleAny, perms.ReadOthers}}
	for _, r := range cfg.Rules {
		c := &r.Watch.Capture
		n.Kernel = n.Kernel || !c.NoKernel
		n.OffCPU = n.OffCPU || !c.NoOffCPU
		n.Ptrace = n.Ptrace || !c.NoPtrace
		n.PacketSocket = n.PacketSocket || r.Watch.Heartbeat.Tap != ""
		n.Rates = append(n.Rates, preflight.Rate{Flag: fmt.Sprintf("rule %s (line %d): freq", r.Name, r.Line), Hz: c.Freq})
		if c.BaselineFreq > 0 && !c.NoFlightRecorder {
			n.Rates = append(n.Rates, preflight.Rate{Flag: fmt.Sprintf("rule %s (line %d): baseline-freq", r.Name, r.Line), Hz: c.BaselineFreq})
		}
		if c.Profile {
			n.Rates = append(n.Rates, preflight.Rate{Flag: fmt.Sprintf("rule %s (line %d): profile-freq", r.Name, r.Line), Hz: c.ProfileFreq})
		}
	}
	if n.Kernel {
		n.AnyProcess = append(n.AnyProcess, perms.KernelNames)
	}
	if n.PacketSocket {
		n.AnyProcess = append(n.AnyProcess, perms.PacketSocket)
	}
	return n
}

// describeConfig is --check: what the configuration says, and the
// processes each rule selects now (a process is watched by the first rule
// that selects it), with a warning on every wrapper among them and the
// wrappers a cmdline: passes over.
func describeConfig(inv *cli.Invocation, cfg *daemon.Config) error {
	w := termsafe.NewWriter(inv.Stdout) // command lines are the processes'
	defer w.Flush()
	fmt.Fprintf(w, "%s: %d rules; captures under %s (keep %d, disk quota %s), at most %d at once and %d stall captures an hour on the host\n",
		cfg.File, len(cfg.Rules), cfg.Out, cfg.Keep, quotaString(cfg.DiskQuota), cfg.MaxConcurrent, cfg.MaxPerHour)
	selected, passed, err := cfg.SelectNow(os.Getpid())
	if err != nil {
		return fmt.Errorf("listing the processes the rules select: %w", err)
	}
	for _, r := range cfg.Rules {
		fmt.Fprintf(w, "  %s (line %d): %s; stall after %v\n", r.Name, r.Line, r.Select.String(), r.Watch.StallAfter)
		n := 0
		for _, s := range selected {
			if s.Rule != r.Name {
				continue
			}
			n++
			fmt.Fprintf(w, "    selects pid %d: %s\n", s.PID, truncateCommand(s.Command))
			if s.Wrapper != "" {
				fmt.Fprintf(w, "      warning: pid %d is a wrapper (%s): its threads wait for the program it runs; select that program instead, by its own command line\n", s.PID, s.Wrapper)
			}
		}
		for _, s := range passed {
			if s.Rule == r.Name {
				fmt.Fprintf(w, "    passes over pid %d, a wrapper (%s) whose arguments match: %s\n", s.PID, s.Wrapper, truncateCommand(s.Command))
			}
		}
		if n == 0 {
			fmt.Fprintf(w, "    selects no process now\n")
		}
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(inv.Stdout, "warning: %s\n", w)
	}
	return nil
}

// truncateCommand keeps a command line to one screen line.
func truncateCommand(s string) string {
	const max = 120
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

func quotaString(n int64) string {
	if n == 0 {
		return "none"
	}
	return humanBytes(n)
}

// checkedDaemonConfig is loadDaemonConfig with everything checked that
// can be before it is used — the rules' sampling rates against the
// kernel's limit, the alert and upload addresses with Datadog's
// environment — at start, by --check and on SIGHUP alike.
func checkedDaemonConfig(path string, cmdline *cli.FlagSet, f *daemonFlags) (*daemon.Config, *hostFlags, error) {
	cfg, host, err := loadDaemonConfig(path, cmdline, f)
	if err != nil {
		return nil, nil, err
	}
	if err := preflight.CheckRates("run the daemon", daemonNeeds(cfg).Rates); err != nil {
		return nil, nil, err
	}
	if err := notify.Check(host.notifyOptions(cfg.Out, slog.New(slog.DiscardHandler))); err != nil {
		return nil, nil, cli.UsageErrorf("%v", err) // a restart would not mend it
	}
	return cfg, host, nil
}

// loadDaemonConfig reads the configuration file and resolves its
// settings with the flags' definitions: the host-wide ones (the command
// line wins) and each rule's.
func loadDaemonConfig(path string, cmdline *cli.FlagSet, f *daemonFlags) (*daemon.Config, *hostFlags, error) {
	file, err := daemon.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var host hostFlags
	hfs := cli.NewFlagSet()
	host.declare(hfs)
	ruleNames := ruleFlagNames()
	for _, s := range file.Globals {
		// "tags" is both: at the top, the host's (on everything).
		if hfs.Lookup(s.Name) == nil && slices.Contains(ruleNames, s.Name) {
			return nil, nil, settingError(file, s, fmt.Errorf("a rule setting: put it under defaults: or in a rule"))
		}
		if err := setAll(hfs, s); err != nil {
			return nil, nil, settingError(file, s, err)
		}
	}
	for _, fl := range hfs.Flags() {
		if cmdline.Changed(fl.Name) {
			if err := hfs.Set(fl.Name, cmdline.Lookup(fl.Name).Value()); err != nil {
				return nil, nil, err
			}
		}
	}
	if !hfs.Changed("out") {
		host.output.out = f.host.output.out // the default, as settled for systemd
	}
	if err := host.check(); err != nil {
		return nil, nil, &daemon.ConfigError{File: file.Path, Msg: configMsg(err)}
	}
	cfg := &daemon.Config{
		File: file.Path, Out: host.output.out, Keep: host.output.keep, DiskQuota: int64(host.diskQuota),
		MaxConcurrent: host.maxConcurrent, MaxPerHour: host.maxPerHour, ScanInterval: host.scanInterval,
		ProfileBudget: daemon.Budget{CPU: float64(host.profileCPU), FDs: host.profileFDs},
	}
	for _, spec := range file.Rules {
		w, err := resolveRule(file, spec, hfs)
		if err != nil {
			return nil, nil, err
		}
		cfg.Rules = append(cfg.Rules, daemon.Rule{Name: spec.Name, Line: spec.Line, Select: spec.Select, Watch: w})
	}
	if err := cfg.Check(); err != nil {
		return nil, nil, &daemon.ConfigError{File: file.Path, Msg: err.Error()}
	}
	return cfg, &host, nil
}

// daemonRuleDefaults are where a daemon's rule differs from watch: no
// flight recorder unless a rule asks (hundreds of processes sampled
// between stalls would cost more than they tell).
var daemonRuleDefaults = []daemon.Setting{{Name: "baseline-freq", Values: []string{"0"}}}

// resolveRule turns a rule's settings (after the defaults) into a watch.
func resolveRule(file *daemon.File, spec daemon.RuleSpec, host *cli.FlagSet) (daemon.Watch, error) {
	var r ruleFlags
	var n ruleNotifyFlags
	fs := cli.NewFlagSet()
	declareRule(fs, &r, &n)
	own := map[string]bool{}
	for _, s := range spec.Settings {
		own[s.Name] = true
	}
	settings := slices.Clone(daemonRuleDefaults)
	for _, s := range file.Defaults {
		if !own[s.Name] {
			settings = append(settings, s)
		}
	}
	settings = append(settings, spec.Settings...)
	for _, s := range settings {
		switch {
		case s.Name == "heartbeat-statsd" || s.Name == "forward":
			return daemon.Watch{}, settingError(file, s, errors.New("the DogStatsD proxy serves one process (stallwatch watch); the daemon reads DogStatsD from the wire: heartbeat-tap: udp://:8125"))
		case fs.Lookup(s.Name) == nil && host.Lookup(s.Name) != nil:
			return daemon.Watch{}, settingError(file, s, errors.New("a host-wide setting: put it at the top of the file"))
		}
		if err := setAll(fs, s); err != nil {
			return daemon.Watch{}, settingError(file, s, err)
		}
	}
	if err := r.check(fs.Changed); err != nil {
		return daemon.Watch{}, &daemon.ConfigError{File: file.Path, Line: spec.Line, Msg: fmt.Sprintf("rule %q: %s", spec.Name, configMsg(err))}
	}
	return daemon.Watch{Settings: r.settings(), Notify: n.notify()}, nil
}

// ruleFlagNames are the names of the settings a rule takes.
func ruleFlagNames() []string {
	var r ruleFlags
	var n ruleNotifyFlags
	fs := cli.NewFlagSet()
	declareRule(fs, &r, &n)
	var names []string
	for _, f := range fs.Flags() {
		names = append(names, f.Name)
	}
	return names
}

// setAll sets a setting's every value.
func setAll(fs *cli.FlagSet, s daemon.Setting) error {
	if fl := fs.Lookup(s.Name); fl != nil && !fl.Repeatable && len(s.Values) > 1 {
		return errors.New("one value, not a list")
	}
	for _, v := range s.Values {
		if err := fs.Set(s.Name, v); err != nil {
			return err
		}
	}
	return nil
}

func settingError(file *daemon.File, s daemon.Setting, err error) error {
	return &daemon.ConfigError{File: file.Path, Line: s.Line, Msg: s.Name + ": " + configMsg(err)}
}

// configMsg is a flag's message said of a setting: names without dashes.
func configMsg(err error) string {
	return strings.ReplaceAll(err.Error(), "--", "")
}
