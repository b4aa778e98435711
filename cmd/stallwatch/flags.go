package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/logfmt"
	"github.com/stallwatch/stallwatch/internal/preflight"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/notify/alert"
	"github.com/stallwatch/stallwatch/notify/hook"
	"github.com/stallwatch/stallwatch/notify/spool"
	"github.com/stallwatch/stallwatch/notify/upload"
	"github.com/stallwatch/stallwatch/watch"
	"github.com/stallwatch/stallwatch/watchdog"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd/tap"
)

// The flag sets several commands share. Each is declared once, here, so
// that a setting has one name and one meaning in watch, record and the
// daemon's rules.

// declarePID declares -p, --pid.
func declarePID(fs *cli.FlagSet, p *int, usage string) {
	f := fs.Int(p, "pid", 0, usage).Completes(cli.PID)
	f.Arg = "PID"
}

// checkPID is the check every command taking --pid makes.
func checkPID(pid int) error {
	switch {
	case pid == 0:
		return cli.UsageErrorf("--pid is required")
	case pid < 0:
		return cli.UsageErrorf("--pid %d: not a process id", pid)
	}
	return nil
}

// captureFlags say how a capture samples: watch, record and the daemon's
// rules.
type captureFlags struct {
	freq                         int
	noOffCPU, noKernel, noPtrace bool
	unwind                       string
	stackCopy                    stackCopyFlag
}

func (c *captureFlags) declare(fs *cli.FlagSet) {
	fs.Group("Capture")
	fs.Int(&c.freq, "freq", capture.DefaultFreq, "sample each thread `HZ` times a second of its CPU time")
	fs.Choice(&c.unwind, "unwind", string(capture.UnwindAuto), capture.UnwindModes,
		"how sampled user stacks are walked, `MODE`: cfi (stack copies and call frame information, whole stacks through code without frame pointers), fp (the kernel's frame-pointer chains: cheapest), auto (fp for pure Go programs, else cfi)")
	fs.Var(&c.stackCopy, "stack-copy", "bytes of user stack each sample copies for --unwind cfi (`SIZE`: 8KiB, 16KiB, 32KiB, at most 60KiB; fixed), or auto: 16KiB to start, doubling per thread up to 60KiB once its stacks need more; deeper stacks end with \"[truncated: stack copy … exhausted]\"").Default = c.stackCopy.String()
	fs.Bool(&c.noOffCPU, "no-offcpu", "do not sample off-CPU (blocked) time; needs less privilege")
	fs.Bool(&c.noKernel, "no-kernel", "leave kernel frames out of stacks; needs less privilege")
	fs.Bool(&c.noPtrace, "no-ptrace", "never stop a thread: the snapshot reads the stacks of blocked threads from /proc only")
}

func (c *captureFlags) check() error {
	switch {
	case c.freq <= 0:
		return cli.UsageErrorf("--freq %d: must be positive", c.freq)
	case c.stackCopy.fixed && (c.stackCopy.size < 256 || c.stackCopy.size > capture.MaxStackCopy):
		return cli.UsageErrorf("--stack-copy %d: must be auto, or between 256 and %d bytes", int(c.stackCopy.size), capture.MaxStackCopy)
	}
	return nil
}

// apply sets cfg's sampling from the flags.
func (c *captureFlags) apply(cfg *capture.Config) {
	cfg.Freq = c.freq
	cfg.NoOffCPU, cfg.NoKernel, cfg.NoPtrace = c.noOffCPU, c.noKernel, c.noPtrace
	cfg.Unwind, cfg.StackCopy = capture.UnwindMode(c.unwind), 0
	if c.stackCopy.fixed {
		cfg.StackCopy = int(c.stackCopy.size)
	}
}

// needs is what sampling with these flags asks of the machine.
func (c *captureFlags) needs(n *preflight.Needs) {
	n.Sample, n.Kernel, n.OffCPU, n.Ptrace = true, !c.noKernel, !c.noOffCPU, !c.noPtrace
	n.Rates = append(n.Rates, preflight.Rate{Flag: "--freq", Hz: c.freq})
}

// startChecks checks everything n needs before a command starts its work
// (package preflight): it fails with every problem at once, or logs what
// the command will do without.
func startChecks(log *slog.Logger, n preflight.Needs) error {
	warnings, err := preflight.Check(n)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn("going on without " + w.String())
	}
	return nil
}

// heartbeatFlags say what a target's heartbeats are: watch and the
// daemon's rules.
type heartbeatFlags struct {
	files        []string
	statsdAddr   string
	metric       string
	metricTags   []string
	forward      string
	httpURL      string
	httpTimeout  time.Duration
	httpInterval time.Duration
	proc         bool
	tap          string
}

func (h *heartbeatFlags) declare(fs *cli.FlagSet) {
	fs.Group("Heartbeat")
	fs.Strings(&h.files, "heartbeat-file", "a file at `PATH` whose mtime, size or content changes at each beat ({pid}: the target's pid, {root}: its root directory)").Completes(cli.File)
	fs.String(&h.tap, "heartbeat-tap", "", "read the DogStatsD datagrams the target sends to the agent at `ADDR` (udp://:8125) from a packet socket, standing in nobody's path (CAP_NET_RAW)")
	fs.String(&h.statsdAddr, "heartbeat-statsd", "", "receive DogStatsD on `ADDR` in the agent's place and forward it (udp://127.0.0.1:8125 or unix:///path; a UDP address without host is loopback)")
	fs.String(&h.metric, "metric", "", "with --heartbeat-tap or --heartbeat-statsd: metric name `GLOB` that is a beat ('*' any run, '?' one char; default any metric)")
	fs.Strings(&h.metricTags, "metric-tag", "with --heartbeat-tap or --heartbeat-statsd: the metric must also carry tag `K:V`")
	fs.String(&h.forward, "forward", "", "with --heartbeat-statsd: forward every datagram to `ADDR` (default $DD_DOGSTATSD_URL, else $DD_AGENT_HOST:8125, else none)")
	fs.String(&h.httpURL, "heartbeat-http", "", "a 2xx answer from GET `URL` ({pid}, {root} as in --heartbeat-file)")
	fs.Duration(&h.httpTimeout, "http-timeout", 2*time.Second, "with --heartbeat-http: the answer must come within this long")
	fs.Duration(&h.httpInterval, "http-interval", time.Second, "with --heartbeat-http: time between probes")
	fs.Bool(&h.proc, "heartbeat-proc", "any CPU time or context switch of the target's threads")
}

// check says what is wrong with the heartbeats; changed tells the flags
// given.
func (h *heartbeatFlags) check(changed func(string) bool) error {
	switch {
	case len(h.files) == 0 && h.statsdAddr == "" && h.httpURL == "" && !h.proc && h.tap == "":
		return cli.UsageErrorf("no heartbeat: give --heartbeat-file, --heartbeat-tap, --heartbeat-statsd, --heartbeat-http or --heartbeat-proc")
	case h.statsdAddr != "" && h.tap != "":
		return cli.UsageErrorf("--heartbeat-tap and --heartbeat-statsd exclude each other: the tap reads what the proxy would receive")
	case h.statsdAddr == "" && h.tap == "" && (h.metric != "" || len(h.metricTags) > 0):
		return cli.UsageErrorf("--metric and --metric-tag go with --heartbeat-tap or --heartbeat-statsd")
	case h.statsdAddr == "" && h.forward != "":
		return cli.UsageErrorf("--forward goes with --heartbeat-statsd")
	case h.httpURL == "" && (changed("http-timeout") || changed("http-interval")):
		return cli.UsageErrorf("--http-timeout and --http-interval go with --heartbeat-http")
	case h.httpURL != "" && (h.httpTimeout <= 0 || h.httpInterval <= 0):
		return cli.UsageErrorf("--http-timeout and --http-interval must be positive")
	}
	for _, f := range h.files {
		if f == "" {
			return cli.UsageErrorf("--heartbeat-file: an empty path")
		}
	}
	if h.tap != "" {
		if _, err := tap.ParseAddr(h.tap); err != nil {
			return cli.UsageErrorf("--heartbeat-tap: %v", err)
		}
	}
	if h.httpURL != "" {
		if err := watchdog.CheckURL(h.httpURL); err != nil {
			return cli.UsageErrorf("--heartbeat-http: %v", err)
		}
	}
	return nil
}

// ruleFlags are how one target is watched: its heartbeats, the stall
// policy, the capture settings and its continuous profile. They are
// watch's flags and, by the same names, the settings of the daemon's
// rules.
type ruleFlags struct {
	heartbeat heartbeatFlags
	policy    policyFlags
	capture   captureFlags
	profile   profileFlags
}

func (r *ruleFlags) declare(fs *cli.FlagSet) {
	r.heartbeat.declare(fs)
	r.policy.declare(fs)
	r.capture.declare(fs)
	r.profile.declare(fs)
}

// needs is what watching a target this way asks of the machine.
func (r *ruleFlags) needs(n *preflight.Needs) {
	r.capture.needs(n)
	n.PacketSocket = r.heartbeat.tap != ""
	if r.policy.baselineFreq > 0 {
		n.Rates = append(n.Rates, preflight.Rate{Flag: "--baseline-freq", Hz: r.policy.baselineFreq})
	}
	if r.profile.on() {
		n.Rates = append(n.Rates, preflight.Rate{Flag: "--profile-freq", Hz: r.profile.freq})
	}
}

// settings are how the flags watch a target (package watch).
func (r *ruleFlags) settings() watch.Settings {
	h := &r.heartbeat
	s := watch.Settings{
		Heartbeat: watch.Heartbeat{
			Files: h.files, HTTP: h.httpURL, HTTPTimeout: h.httpTimeout, HTTPInterval: h.httpInterval,
			Proc: h.proc, Tap: h.tap, Metric: h.metric, MetricTags: h.metricTags,
		},
		StallAfter: r.policy.stallAfter, RecaptureAfter: r.policy.recaptureAfter, MaxCaptures: r.policy.maxCaptures,
		ProfilePeriod: r.profile.period,
	}
	r.policy.apply(&s.Capture)
	r.capture.apply(&s.Capture)
	r.profile.apply(&s.Capture)
	return s
}

func (r *ruleFlags) check(changed func(string) bool) error {
	if err := r.heartbeat.check(changed); err != nil {
		return err
	}
	if err := r.policy.check(); err != nil {
		return err
	}
	if err := r.capture.check(); err != nil {
		return err
	}
	return r.profile.check(changed, r.capture.noOffCPU)
}

// profileFlags say whether and how a target is profiled continuously:
// watch and the daemon's rules.
type profileFlags struct {
	period time.Duration
	freq   int
	offCPU bool
}

func (p *profileFlags) declare(fs *cli.FlagSet) {
	fs.Group("Continuous profile")
	fs.Duration(&p.period, "profile-period", 0, "profile the target continuously: every `DUR` (60s; 1s to 10m) the samples of that period as one profile, kept under --out/profiles and uploaded with the captures (0: off)")
	fs.Int(&p.freq, "profile-freq", capture.DefaultProfileFreq, "with --profile-period: sample each thread `HZ` times a second of its CPU time between captures")
	fs.Bool(&p.offCPU, "profile-offcpu", "with --profile-period: add off-CPU (blocked) time to the profiles; each context switch of the target then costs a sample")
}

func (p *profileFlags) on() bool { return p.period > 0 }

func (p *profileFlags) check(changed func(string) bool, noOffCPU bool) error {
	switch {
	case p.period < 0 || p.period > 0 && (p.period < continuous.MinPeriod || p.period > continuous.MaxPeriod):
		return cli.UsageErrorf("--profile-period %v: between %v and %v (0: off)", p.period, continuous.MinPeriod, continuous.MaxPeriod)
	case !p.on() && (changed("profile-freq") || changed("profile-offcpu")):
		return cli.UsageErrorf("--profile-freq and --profile-offcpu go with --profile-period")
	case p.freq <= 0:
		return cli.UsageErrorf("--profile-freq %d: must be positive", p.freq)
	case p.offCPU && noOffCPU:
		return cli.UsageErrorf("--profile-offcpu and --no-offcpu exclude each other")
	}
	return nil
}

// apply sets cfg's continuous profiling from the flags.
func (p *profileFlags) apply(cfg *capture.Config) {
	cfg.Profile, cfg.ProfileFreq, cfg.ProfileOffCPU = p.on(), p.freq, p.offCPU
}

// profileStoreFlags bound the continuous profiles' files under --out:
// watch's flags, and the daemon's host-wide settings.
type profileStoreFlags struct {
	keep     time.Duration
	maxBytes byteSize
}

func (p *profileStoreFlags) declare(fs *cli.FlagSet) {
	fs.Group("Continuous profile")
	fs.Duration(&p.keep, "profile-keep", continuous.DefaultKeep, "keep the continuous profiles' files under --out/profiles this long")
	p.maxBytes = continuous.DefaultMaxBytes
	fs.Var(&p.maxBytes, "profile-max-bytes", "keep the continuous profiles' files within `SIZE` in all (1GiB, 500MiB); the oldest go first, a file still to upload last").Default = "1GiB"
}

func (p *profileStoreFlags) check() error {
	if p.keep <= 0 || p.maxBytes <= 0 {
		return cli.UsageErrorf("--profile-keep and --profile-max-bytes must be positive")
	}
	return nil
}

// config is the profiler's configuration: its files under out, its
// uploads through queue (nil: none).
func (p *profileStoreFlags) config(out string, queue *spool.Spool, log *slog.Logger) continuous.Config {
	c := continuous.Config{Dir: filepath.Join(out, continuous.DirName), Keep: p.keep, MaxBytes: int64(p.maxBytes), Logger: log}
	if queue != nil {
		c.Queue = queue
	}
	return c
}

// outputFlags say where capture directories go.
type outputFlags struct {
	out  string
	keep int
}

// declare declares --out with its default, def.
func (o *outputFlags) declare(fs *cli.FlagSet, def string) {
	fs.Group("Output")
	fs.String(&o.out, "out", def, "write capture directories under `DIR` (under systemd, $STATE_DIRECTORY/captures)").Completes(cli.Dir)
	fs.Int(&o.keep, "keep", 0, "keep only the `N` newest capture directories under --out (0: all)")
}

func (o *outputFlags) check() error {
	switch {
	case o.out == "":
		return cli.UsageErrorf("--out: an empty directory name")
	case o.keep < 0:
		return cli.UsageErrorf("--keep %d: cannot be negative", o.keep)
	}
	return nil
}

// stateDir is where a service keeps its state: systemd's
// StateDirectory= ($STATE_DIRECTORY, the first of several), else
// /var/lib/stallwatch.
func stateDir(getenv func(string) string) string {
	if d, _, _ := strings.Cut(getenv("STATE_DIRECTORY"), ":"); filepath.IsAbs(d) {
		return d
	}
	return "/var/lib/stallwatch"
}

// settle moves a default --out that would land where no capture belongs:
// under systemd (StateDirectory= set) or from / (a unit's working
// directory), captures go to the state directory's captures/.
func (o *outputFlags) settle(changed func(string) bool, getenv func(string) string) {
	if changed("out") {
		return
	}
	cwd, _ := os.Getwd()
	if getenv("STATE_DIRECTORY") != "" || cwd == "/" {
		o.out = filepath.Join(stateDir(getenv), "captures")
	}
}

func (o *outputFlags) apply(cfg *capture.Config) {
	cfg.Out, cfg.Keep = o.out, o.keep
}

// policyFlags say when the watchdog captures: watch and the daemon's
// rules.
type policyFlags struct {
	stallAfter     time.Duration
	captureFor     time.Duration
	recaptureAfter time.Duration
	maxCaptures    int
	baselineFreq   int
	history        time.Duration
}

func (p *policyFlags) declare(fs *cli.FlagSet) {
	fs.Group("Stall")
	fs.Duration(&p.stallAfter, "stall-after", 10*time.Second, "a heartbeat silent this long is a stall")
	fs.Duration(&p.captureFor, "capture-for", capture.DefaultCaptureFor, "sample this long at --freq when a stall starts")
	fs.Duration(&p.recaptureAfter, "recapture-after", 5*time.Minute, "capture a stall that lasts again after this long")
	fs.Int(&p.maxCaptures, "max-captures", 6, "at most `N` stall captures an hour (0: log stalls, capture only on SIGUSR1)")
	fs.Int(&p.baselineFreq, "baseline-freq", capture.DefaultBaselineFreq, "background sampling between captures, `HZ` (0: off, no history)")
	fs.Duration(&p.history, "history", capture.DefaultHistory, "background samples from before the trigger that go into a capture")
}

// maxCaptureFor bounds --capture-for: a capture holds its samples until
// it is written, and a stall's evidence is in its first minutes.
const maxCaptureFor = 10 * time.Minute

func (p *policyFlags) check() error {
	switch {
	case p.stallAfter <= 0:
		return cli.UsageErrorf("--stall-after %v: must be positive", p.stallAfter)
	case p.captureFor <= 0 || p.captureFor > maxCaptureFor:
		return cli.UsageErrorf("--capture-for %v: must be positive and at most %v (a longer recording is stallwatch record's)", p.captureFor, maxCaptureFor)
	case p.recaptureAfter <= 0:
		return cli.UsageErrorf("--recapture-after %v: must be positive", p.recaptureAfter)
	case p.history < 0:
		return cli.UsageErrorf("--history %v: cannot be negative", p.history)
	case p.baselineFreq < 0:
		return cli.UsageErrorf("--baseline-freq %d: cannot be negative", p.baselineFreq)
	case p.maxCaptures < 0:
		return cli.UsageErrorf("--max-captures %d: cannot be negative", p.maxCaptures)
	}
	return nil
}

func (p *policyFlags) apply(cfg *capture.Config) {
	cfg.CaptureFor, cfg.BaselineFreq, cfg.History = p.captureFor, p.baselineFreq, p.history
	cfg.NoFlightRecorder = p.baselineFreq == 0
}

// declareFormat declares --format text|json: the one spelling, in every
// command, of output a program reads (report's --format adds its other
// renderings). what names the output in the usage.
func declareFormat(fs *cli.FlagSet, p *string, what string) {
	fs.Choice(p, "format", "text", []string{"text", "json"}, "print "+what+" as `FORMAT`: text or json")
}

// logger returns the logger of a command: slog's text lines for watch,
// plain lines for the commands a person runs and reads (prefix names the
// command), JSON with --log-format json. quiet leaves errors only: what a
// warning says of a capture is in its capture.json's notes, and a script
// reading the directory's path wants nothing else.
func (g *globals) logger(w io.Writer, prefix string, quiet bool) *slog.Logger {
	lvl := slog.LevelInfo
	if quiet {
		lvl = slog.LevelError
	}
	return logfmt.New(w, logfmt.Options{Format: g.logFormat, Plain: prefix != "", Prefix: prefix, Level: lvl})
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// off is the value of --statsd and --upload that turns alerts or uploads
// off whatever Datadog's environment says.
const off = "off"

// datadogFlags say where alerts and uploads go and how they are tagged:
// watch, record and upload.
type datadogFlags struct {
	statsd, upload        string
	tags, service, env    string
	maxAge                time.Duration
	maxBytes              byteSize
	withStatsd, withQueue bool // the command alerts; the command queues uploads
	// perTarget: the daemon, whose rules each name their service
	// (ruleNotifyFlags); the host's flags have no --service.
	perTarget bool
}

func (d *datadogFlags) declare(fs *cli.FlagSet) {
	fs.Group("Datadog")
	if d.withStatsd {
		fs.String(&d.statsd, "statsd", "", "send alerts (events, service check, metrics) to DogStatsD at `ADDR`: udp://host:port, host:port, unix:///path (default $DD_DOGSTATSD_URL, else $DD_AGENT_HOST:8125, else /var/run/datadog/dsd.socket if it exists; off: none)")
	}
	fs.String(&d.upload, "upload", "", "upload captures to the Datadog agent at `URL`: http://host:8126 or unix:///path (default $DD_TRACE_AGENT_URL, else http://$DD_AGENT_HOST:8126, else /var/run/datadog/apm.socket if it exists; off: none)")
	fs.String(&d.tags, "tags", "", "more tags `K:V,...` on alerts and uploads (default $DD_TAGS)")
	if !d.perTarget {
		declareService(fs, &d.service)
	}
	fs.String(&d.env, "env", "", "the environment `NAME` of the env tag (default $DD_ENV); $DD_VERSION gives the version tag")
	if d.withQueue {
		d.maxBytes = spool.DefaultMaxBytes
		fs.Duration(&d.maxAge, "upload-max-age", spool.DefaultMaxAge, "an upload the agent has not taken after this long is dropped from the queue, and said")
		fs.Var(&d.maxBytes, "upload-max-bytes", "the upload queue holds at most `SIZE` of profiles (1GiB, 500MiB …); the oldest are dropped, and said")
	}
}

// declareService declares --service: watch, record and upload, and a
// daemon's rules.
func declareService(fs *cli.FlagSet, p *string) {
	fs.String(p, "service", "", "the target's service `NAME`, in tags and alert titles (default $DD_SERVICE, else the process name)")
}

func (d *datadogFlags) check() error {
	if d.statsd != "" && d.statsd != off {
		if _, err := alert.ParseAddr(d.statsd); err != nil {
			return cli.UsageErrorf("--statsd: %v", err)
		}
	}
	if d.upload != "" && d.upload != off {
		if _, err := upload.ParseURL(d.upload); err != nil {
			return cli.UsageErrorf("--upload: %v", err)
		}
	}
	if d.withQueue && (d.maxAge <= 0 || d.maxBytes <= 0) {
		return cli.UsageErrorf("--upload-max-age and --upload-max-bytes must be positive")
	}
	return nil
}

// options are notify.Setup's options; queueDir is where uploads wait.
func (d *datadogFlags) options(queueDir string, log *slog.Logger) notify.Options {
	o := notify.Options{
		Statsd: d.statsd, Upload: d.upload, Tags: d.tags, Service: d.service, Env: d.env,
		QueueDir: queueDir, MaxAge: d.maxAge, MaxBytes: int64(d.maxBytes), Logger: log,
	}
	o.NoAlerts = !d.withStatsd || d.statsd == off
	o.NoUploads = d.upload == off
	if o.Statsd == off {
		o.Statsd = ""
	}
	if o.Upload == off {
		o.Upload = ""
	}
	return o
}

// hookFlags are the commands run on what the watchdog sees.
type hookFlags struct {
	onCapture, onRecover string
	timeout              time.Duration
}

func (h *hookFlags) declare(fs *cli.FlagSet) {
	fs.Group("Hooks")
	h.declareCommands(fs)
	h.declareTimeout(fs)
}

// declareCommands declares --on-capture and --on-recover: watch's flags,
// and a daemon rule's settings.
func (h *hookFlags) declareCommands(fs *cli.FlagSet) {
	fs.String(&h.onCapture, "on-capture", "", "run `CMD` (sh -c) after each capture is written, with STALLWATCH_CAPTURE_DIR, _PID, _PROCESS, _TRIGGER, _STALL_SECONDS, _TOP_FINDING, _SERVICE, _HOST and _EVENT in its environment; its output goes to the log")
	fs.String(&h.onRecover, "on-recover", "", "run `CMD` when a stall ends (STALLWATCH_EVENT=recover; STALLWATCH_STALL_SECONDS is the whole stall)")
}

// declareTimeout declares --hook-timeout: watch's flag, and the daemon's
// (one bound for every rule's hooks).
func (h *hookFlags) declareTimeout(fs *cli.FlagSet) {
	fs.Duration(&h.timeout, "hook-timeout", hook.DefaultTimeout, "a hook still running after this long is killed, its whole process group")
}

func (h *hookFlags) check() error {
	if h.timeout <= 0 {
		return cli.UsageErrorf("--hook-timeout %v: must be positive", h.timeout)
	}
	return nil
}

func (h *hookFlags) apply(o *notify.Options) {
	o.OnCapture, o.OnRecover, o.HookTimeout = h.onCapture, h.onRecover, h.timeout
}

// byteSize is a flag of bytes: a number with an optional unit (K, KiB,
// M, MiB, G, GiB; powers of 1024).
type byteSize int64

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	num := strings.TrimRightFunc(s, unicode.IsLetter)
	unit := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "b"))
	unit = strings.TrimSuffix(unit, "I")
	mult := map[string]int64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || mult == 0 || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q: want a size such as 512MiB or 2GiB", s)
	}
	*b = byteSize(n * mult)
	return nil
}

// stackCopyFlag is --stack-copy: "auto" (copies that grow as the stacks
// need, capture.Config.StackCopy 0) or a fixed size.
type stackCopyFlag struct {
	size  byteSize
	fixed bool
}

func (f *stackCopyFlag) String() string {
	if !f.fixed {
		return "auto"
	}
	return f.size.String()
}

func (f *stackCopyFlag) Set(s string) error {
	if s == "auto" {
		*f = stackCopyFlag{}
		return nil
	}
	if err := f.size.Set(s); err != nil {
		return fmt.Errorf("%q: want auto, or a size such as 16KiB or 32KiB", s)
	}
	f.fixed = true
	return nil
}

// percent is a flag of a share: "5%" (or 0.05).
type percent float64

func (p *percent) String() string {
	return strconv.FormatFloat(float64(*p)*100, 'f', -1, 64) + "%"
}

func (p *percent) Set(s string) error {
	v, isPct := strings.CutSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(v, 64)
	if isPct {
		f /= 100
	}
	if err != nil || f <= 0 || f > 64 {
		return fmt.Errorf("%q: want a share of a core such as 5%% or 0.05", s)
	}
	*p = percent(f)
	return nil
}
