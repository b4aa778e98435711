package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/procwatch"
	"github.com/stallwatch/stallwatch/internal/sdnotify"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/watch"
	"github.com/stallwatch/stallwatch/watchdog"
)

// Config is a configuration in force: the host-wide settings and the
// rules, resolved (see File for the configuration as written).
type Config struct {
	// File is where it was read from, for messages.
	File string
	// Out is the directory captures go under; Keep how many to keep
	// there (0: all).
	Out  string
	Keep int
	// DiskQuota bounds the bytes of the captures under Out (0: no
	// bound): the oldest are removed to make room.
	DiskQuota int64
	// MaxConcurrent captures run at once across every target; a capture
	// waits for a slot.
	MaxConcurrent int
	// MaxPerHour stall captures across every target in any hour (0:
	// no host-wide bound). Captures asked for (SIGUSR1, ctl capture) are
	// not counted against it.
	MaxPerHour int
	// ScanInterval is how often /proc is scanned for new processes when
	// the process connector cannot be used (and, ten times slower, as a
	// backstop when it can).
	ScanInterval time.Duration
	// ProfileBudget bounds what the continuous profiles of every target
	// cost the host; over it the daemon profiles less (profiles.go).
	ProfileBudget Budget
	// Rules, in order: a process is watched by the first rule that
	// selects it.
	Rules []Rule
}

// Rule selects processes and says how to watch them.
type Rule struct {
	Name   string
	Line   int
	Select Selector
	Watch  Watch
}

// Watch is what a rule does to each process it selects: the settings of
// `stallwatch watch` (package watch), and what alerts, uploads and hooks
// say of them. Of the capture settings, PID, Out, Keep, Snapshot,
// Heartbeat, Uploads and Logger are the daemon's to fill; a rule whose
// ProfilePeriod is not zero profiles its processes continuously through
// Options.Profiles.
type Watch struct {
	watch.Settings
	// Notify is what alerts, uploads and hooks say of and do for the
	// rule's processes (Options.Events acts on it).
	Notify Notify
}

// Notify is a rule's part in alerts, uploads and hooks: the service its
// processes are named by ("": each by its process name), their own tags,
// and the rule's hook commands (in place of the host's when given).
type Notify struct {
	Service              string
	Tags                 []string
	OnCapture, OnRecover string
}

// Check says what is wrong with a configuration as a whole.
func (c *Config) Check() error {
	switch {
	case c.Out == "":
		return errors.New("out: an empty directory name")
	case c.MaxConcurrent < 1:
		return fmt.Errorf("max-concurrent-captures %d: at least 1", c.MaxConcurrent)
	case c.MaxPerHour < 0 || c.DiskQuota < 0 || c.Keep < 0:
		return errors.New("max-captures-per-hour, disk-quota and keep cannot be negative")
	case c.ScanInterval < 100*time.Millisecond:
		return fmt.Errorf("scan-interval %v: at least 100ms", c.ScanInterval)
	case len(c.Rules) == 0:
		return errors.New("no rules")
	}
	for i := range c.Rules {
		if c.Rules[i].Watch.Heartbeat.Empty() {
			return fmt.Errorf("rule %q (line %d): no heartbeat: give heartbeat-file, heartbeat-http, heartbeat-proc or heartbeat-tap", c.Rules[i].Name, c.Rules[i].Line)
		}
	}
	return nil
}

// Options are the daemon's settings that a reload does not change.
type Options struct {
	Logger *slog.Logger
	// Notifier tells systemd the daemon's state (nil: not under
	// systemd); WatchdogEvery is how often to ping its watchdog (0:
	// never).
	Notifier      *sdnotify.Notifier
	WatchdogEvery time.Duration
	// StateDir holds what survives a restart (the host-wide capture
	// history, so that a restart loop does not reset the hourly bound);
	// "" keeps nothing.
	StateDir string
	// ControlSocket is the path of the control socket ("": none).
	ControlSocket string
	// NoConnector scans /proc only, even where the process connector
	// could be used.
	NoConnector bool
	// SessionIdle is how long a capture session without a flight
	// recorder stays open after its last use (default 5m).
	SessionIdle time.Duration
	// Events, when set, gives each target's watchdog the handler of what
	// it sees (package notify: alerts, hooks and uploads, one Notifier
	// for every target); nil: nothing is told.
	Events func(notify.Target) func(watchdog.Event)
	// Uploads is the queue of the captures' uploads, when uploads are
	// on: keep spares a capture whose upload is pending.
	Uploads capture.PendingUploads
	// Profiles profiles continuously the processes of the rules that set
	// profile-period: one schedule, files and uploads for every target
	// (nil: those rules' processes are not profiled, and New says so).
	Profiles *continuous.Profiler
}

// Daemon watches every process its rules select.
type Daemon struct {
	opts   Options
	log    *slog.Logger
	self   int
	cfg    *Config
	out    string       // cfg.Out at New: it changes on a restart only
	keep   atomic.Int64 // cfg.Keep in force
	lim    *limits
	quota  *quota
	budget *profileBudget // touched on Run's goroutine only
	// captures counts the captures begun; budgetCaptures is the count
	// the budget's last window saw (a window with a capture is not
	// judged).
	captures       atomic.Int64
	budgetCaptures int64
	state          *stateFile
	taps           *watch.Taps
	ctl            *controlServer
	// poller reads every target's progress in shared wake-ups.
	poller *watchdog.Poller

	// Owned by Run's goroutine.
	targets map[int]*target // by pid
	// stopping are the pids of targets stopped whose capture in progress
	// is still being written: they are looked at again once released.
	stopping map[int]bool
	seen     map[int]seen
	// cmdlineBytes is how much of a command line is read to select by
	// (cmdlineNeed, and enough to show); execs bounds the work exec
	// events make.
	cmdlineBytes int
	cmdlines     procwatch.CmdlineReader
	execBudget   execBudget
	// conn is the process connector (nil: scans only); it reports the
	// forks of watched processes too (forkParents).
	conn        *procwatch.Connector
	forkParents bool  // the watched set changed since they were told
	newParents  []int // targets added since: their children born before are looked at
	gen         int   // configuration generation

	reload   chan *Config
	do       chan func()
	exits    chan *target
	execs    chan []int
	named    chan int      // pids a pid file named, at once (pidfileWatch)
	pidWatch *pidfileWatch // of the configuration in force
	overrun  chan struct{}
	released chan int       // a stopped target's pid, once all it held is closed
	closing  chan struct{}  // closed when Run ends: releases no longer report
	releases sync.WaitGroup // targets being released
	stopped  chan struct{}
	discover string // how processes are found, for status
	started  time.Time
}

// seen is what a scan remembers of a process no rule selected.
type seen struct {
	start     uint64
	first     time.Time
	evaluated time.Time
	gen       int
}

// Warnings are what the configuration allows that an operator should
// know: a rule any user's processes can match.
func (c *Config) Warnings() []string {
	var out []string
	for _, r := range c.Rules {
		if r.Select.ChosenByAnyone() {
			out = append(out, fmt.Sprintf("rule %s (line %d) selects by command line or executable alone, which whoever runs a process chooses: any user's process named so is watched and captured (within its user's share of max-captures-per-hour); add user: or pidfile:", r.Name, r.Line))
		}
	}
	return out
}

// New prepares a daemon: the capture directory (refused now if unsafe),
// the quota's count, the saved capture history and the control socket.
func New(cfg *Config, opts Options) (*Daemon, error) {
	if err := cfg.Check(); err != nil {
		return nil, &ConfigError{File: cfg.File, Msg: err.Error()}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SessionIdle <= 0 {
		opts.SessionIdle = 5 * time.Minute
	}
	d := &Daemon{
		opts: opts, log: opts.Logger, self: os.Getpid(), cfg: cfg,
		targets: map[int]*target{}, stopping: map[int]bool{}, seen: map[int]seen{},
		released: make(chan int, 16), closing: make(chan struct{}),
		reload: make(chan *Config, 1), do: make(chan func()), exits: make(chan *target, 16),
		execs: make(chan []int, 64), named: make(chan int, 64), overrun: make(chan struct{}, 1), stopped: make(chan struct{}),
		started: time.Now(), out: cfg.Out, poller: watchdog.NewPoller(),
	}
	d.keep.Store(int64(cfg.Keep))
	d.cmdlineBytes = cmdlineBytes(cfg)
	for _, w := range cfg.Warnings() {
		d.log.Warn(w)
	}
	for _, r := range cfg.Rules {
		if r.Watch.ProfilePeriod > 0 && opts.Profiles == nil {
			d.log.Warn("rule sets profile-period but this daemon profiles nothing continuously", "rule", r.Name)
		}
	}
	var err error
	var pending func(string) bool
	if opts.Uploads != nil {
		pending = opts.Uploads.Pending
	}
	if d.quota, err = openQuota(cfg.Out, cfg.DiskQuota, pending, d.log); err != nil {
		return nil, err
	}
	if d.state, err = openState(opts.StateDir); err != nil {
		d.quota.close()
		return nil, err
	}
	d.lim = newLimits(cfg.MaxConcurrent, cfg.MaxPerHour, len(cfg.Rules), d.state, d.quota)
	d.budget = newProfileBudget(cfg.ProfileBudget, d.log)
	d.taps = watch.NewTaps(d.log)
	if opts.ControlSocket != "" {
		if d.ctl, err = listenControl(opts.ControlSocket, d); err != nil {
			d.quota.close()
			d.state.close()
			return nil, err
		}
	}
	return d, nil
}

// Reload replaces the configuration; Run applies it between two events.
// The caller has read and checked it: a configuration that cannot be used
// never reaches here.
func (d *Daemon) Reload(cfg *Config) error {
	if err := cfg.Check(); err != nil {
		return &ConfigError{File: cfg.File, Msg: err.Error()}
	}
	select {
	case <-d.reload: // an older one not applied yet
	default:
	}
	d.reload <- cfg
	return nil
}

// CaptureAll asks every watched process for a capture now (SIGUSR1).
// Captures wait for a slot of max-concurrent-captures.
func (d *Daemon) CaptureAll() int {
	n := 0
	d.call(func() {
		for _, t := range d.targets {
			t.w.CaptureNow()
			n++
		}
	})
	return n
}

// call runs f on Run's goroutine and waits for it; after Run returned it
// does nothing.
func (d *Daemon) call(f func()) bool {
	done := make(chan struct{})
	select {
	case d.do <- func() { f(); close(done) }:
		<-done
		return true
	case <-d.stopped:
		return false
	}
}

// Run watches until ctx is done. It returns nil then, or the error that
// stopped it.
func (d *Daemon) Run(ctx context.Context) error {
	defer close(d.stopped)
	defer d.closeAll()
	if d.ctl != nil {
		go d.ctl.serve()
	}
	scanEvery := d.startDiscovery(ctx)
	scan := time.NewTicker(scanEvery)
	defer scan.Stop()
	d.watchPIDFiles()
	defer func() { d.pidWatch.close() }()
	d.scan()
	var ping <-chan time.Time
	if d.opts.WatchdogEvery > 0 {
		t := time.NewTicker(d.opts.WatchdogEvery)
		defer t.Stop()
		ping = t.C
	}
	d.notifyReady()
	statusTick := time.NewTicker(budgetWindow)
	defer statusTick.Stop()
	for {
		d.tellForkParents()
		select {
		case <-ctx.Done():
			_ = d.opts.Notifier.Stopping()
			d.log.Info("stopping", "targets", len(d.targets))
			return nil
		case <-scan.C:
			d.scan()
		case <-d.overrun:
			d.log.Warn("process events were lost; scanning /proc")
			d.scan()
		case pids := <-d.execs:
			now := time.Now()
			for _, pid := range pids {
				if d.execBudget.take(now) {
					d.execBudget.charge(d.consider(pid, now, true))
				}
			}
			d.logExecOverflow(now)
		case pid := <-d.named:
			d.consider(pid, time.Now(), true)
		case t := <-d.exits:
			d.targetEnded(t)
		case cfg := <-d.reload:
			d.apply(cfg)
		case pid := <-d.released:
			delete(d.stopping, pid)
			d.consider(pid, time.Now(), true) // under the rule that selects it now
		case f := <-d.do:
			f()
		case <-ping:
			_ = d.opts.Notifier.Ping()
		case <-statusTick.C:
			_ = d.opts.Notifier.Status(d.statusLine())
			d.logExecOverflow(time.Now())
			d.checkBudget(time.Now())
		}
	}
}

// startDiscovery subscribes to the process connector if it can and
// returns how often to scan /proc.
func (d *Daemon) startDiscovery(ctx context.Context) time.Duration {
	every := d.cfg.ScanInterval
	if d.opts.NoConnector {
		d.discover = "scan of /proc every " + every.String()
		d.log.Info("finding processes by a scan of /proc", "every", every)
		return every
	}
	// Exits too: most of a host's execs are short (a shell's commands),
	// and one that exits in the batch of its exec is dropped there,
	// never looked for in /proc.
	c, err := procwatch.Listen()
	if err != nil {
		d.discover = "scan of /proc every " + every.String()
		d.log.Info("finding processes by a scan of /proc (the process connector needs root in the host's namespaces)", "every", every, "connector", err)
		return every
	}
	d.conn = c
	go func() {
		exited := map[int]int{} // pid → its exit's index in the batch
		err := c.RunBatches(ctx, execBatch, func(evs []procwatch.Event) {
			clear(exited)
			for i, ev := range evs {
				if ev.Exit {
					exited[ev.PID] = i
				}
			}
			var pids []int
			for i, ev := range evs {
				// An exit is the watchdog's to see (its pidfd); an exec
				// whose process exited after it in the batch is gone.
				if j, gone := exited[ev.PID]; !ev.Exit && (!gone || j < i) {
					pids = append(pids, ev.PID)
				}
			}
			if len(pids) == 0 {
				return
			}
			select {
			case d.execs <- pids:
			default:
				d.lostEvents()
			}
		}, d.lostEvents)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("the process connector failed; scanning /proc only", "err", err)
		}
	}()
	every = max(every*10, 20*time.Second)
	d.discover = "process connector (exec events, and forks of watched processes), and a scan of /proc every " + every.String()
	d.log.Info("finding processes by the kernel's exec events", "backstop_scan_every", every)
	return every
}

// execBatch is how often the process connector is read: the execs of the
// host wait for it in its socket, and each wake-up of the daemon costs
// more than reading them. A process is watched within it of its exec.
const execBatch = 100 * time.Millisecond

func (d *Daemon) lostEvents() {
	select {
	case d.overrun <- struct{}{}:
	default:
	}
}

func (d *Daemon) notifyReady() {
	line := d.statusLine()
	d.log.Info("ready", "config", d.cfg.File, "rules", len(d.cfg.Rules), "watching", len(d.targets), "out", d.cfg.Out)
	if err := d.opts.Notifier.Ready(line); err != nil {
		d.log.Warn("telling systemd we are ready", "err", err)
	}
}

// statusLine is the one-line status systemctl shows.
func (d *Daemon) statusLine() string {
	stalled := 0
	for _, t := range d.targets {
		switch t.w.Status().State {
		case "stalled", "capturing", "cooldown":
			stalled++
		}
	}
	return fmt.Sprintf("watching %d processes (%d stalled) with %d rules", len(d.targets), stalled, len(d.cfg.Rules))
}

// scan looks at every process in /proc.
func (d *Daemon) scan() {
	now := time.Now()
	pids, err := procwatch.List()
	if err != nil {
		d.log.Error("scanning processes", "err", err)
		return
	}
	pidfiles := d.pidfiles()
	alive := make(map[int]struct{}, len(pids))
	for _, pid := range pids {
		alive[pid] = struct{}{}
		_, named := pidfiles[pid]
		d.consider(pid, now, named)
	}
	for pid := range d.seen {
		if _, ok := alive[pid]; !ok {
			delete(d.seen, pid)
		}
	}
}

// watchPIDFiles watches the pid files of the rules in force, in place of
// those of the configuration before.
func (d *Daemon) watchPIDFiles() {
	d.pidWatch.close()
	d.pidWatch = watchPIDFiles(d.cfg.Rules, d.log, func(pid int) {
		select {
		case d.named <- pid:
		default: // full: the scan reads the pid file too
		}
	})
}

// pidfiles reads every rule's pid file: the pids they name.
func (d *Daemon) pidfiles() map[int]struct{} {
	m := map[int]struct{}{}
	for i := range d.cfg.Rules {
		if pid := readPIDFile(d.cfg.Rules[i].Select.PIDFile); pid > 0 {
			m[pid] = struct{}{}
		}
	}
	return m
}

// readPIDFile reads a pid file: a decimal pid, maybe followed by a
// newline. 0 when there is none.
func readPIDFile(path string) int {
	if path == "" {
		return 0
	}
	b, err := procfs.ReadLimited(path, 64)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Revisit times: a process no rule selected is looked at again, in case
// it executed another program, at every scan while it is young and every
// revisitOld after (the process connector reports an exec at once).
const (
	youngFor   = time.Minute
	revisitOld = 30 * time.Second
)

// consider starts watching pid if a rule selects it. force looks at it
// even if it was looked at recently (an exec, a pid file naming it). It
// returns the bytes of command line it read (what exec events are
// charged, execBudget).
func (d *Daemon) consider(pid int, now time.Time, force bool) int {
	if pid == d.self || d.stopping[pid] {
		return 0
	}
	if _, ok := d.targets[pid]; ok {
		// Watched already; a pid reused before the old process's exit
		// reached us is looked at again when its target ends.
		return 0
	}
	s, ok := d.seen[pid]
	if ok && !force && s.gen == d.gen {
		young := now.Sub(s.first) < youngFor
		if !young && now.Sub(s.evaluated) < revisitOld {
			return 0
		}
	}
	read, out, err := d.cmdlineRulesOut(pid)
	if errors.Is(err, procfs.ErrGone) {
		return read // most of a host's execs: gone before they are read
	}
	if out {
		if force {
			// An exec, or a pid file naming it: the process's start
			// time is left unread (it would double the files read a
			// host's exec costs) — a new program is young again, and
			// the next scan reads the start time (a pid reused since is
			// then a new process).
			s = seen{first: now}
		} else {
			id, err := procwatch.StartOf(pid)
			if err != nil {
				return read // gone
			}
			if !ok || s.start != id.Start {
				s = seen{start: id.Start, first: now}
			}
		}
		s.evaluated, s.gen = now, d.gen
		d.seen[pid] = s
		return read
	}
	f, err := procwatch.ReadCmdline(pid, d.cmdlineBytes)
	if err != nil {
		return read
	}
	read += min(len(f.CommandLine()), d.cmdlineBytes)
	if !ok || s.start != f.Start {
		s = seen{start: f.Start, first: now}
	}
	s.evaluated, s.gen = now, d.gen
	d.seen[pid] = s
	if len(f.Cmdline) == 0 {
		return read // a kernel thread
	}
	if r := d.match(&f); r != nil {
		d.startTarget(f, r)
	}
	return read
}

// cmdlineRulesOut reports whether process pid's command line alone rules
// it out: every rule selects by command line, and none matches (an empty
// one, a kernel thread's or a zombie's, matches none), and how many bytes
// of it were read; err is why it could not be read (procfs.ErrGone: the
// process exited). It reads one file, into the daemon's buffer, and
// allocates nothing where the facts take six files: the daemon looks at
// every exec on the host.
func (d *Daemon) cmdlineRulesOut(pid int) (read int, out bool, err error) {
	for i := range d.cfg.Rules {
		if d.cfg.Rules[i].Select.Cmdline == nil {
			return 0, false, nil
		}
	}
	line, err := d.cmdlines.Read(pid, d.cmdlineBytes)
	if err != nil {
		return 0, false, err
	}
	for i := range d.cfg.Rules {
		if len(line) > 0 && d.cfg.Rules[i].Select.Cmdline.Match(line) {
			return len(line), false, nil
		}
	}
	return len(line), true, nil
}

// match is the first rule that selects f.
func (d *Daemon) match(f *procwatch.Facts) *Rule {
	for i := range d.cfg.Rules {
		r := &d.cfg.Rules[i]
		if r.Select.Match(f, readPIDFile(r.Select.PIDFile)) {
			return r
		}
	}
	return nil
}

// apply puts a new configuration in force: targets whose rule is gone,
// no longer selects them or watches them differently are stopped (and
// watched again under the new rule at once); host-wide limits change in
// place.
func (d *Daemon) apply(cfg *Config) {
	old := d.cfg
	if cfg.Out != old.Out {
		d.log.Warn("out changes when stallwatch restarts; captures still go to the old directory", "out", old.Out, "configured", cfg.Out)
		cfg.Out = old.Out
	}
	if cfg.ScanInterval != old.ScanInterval {
		d.log.Warn("scan-interval changes when stallwatch restarts", "scan_interval", old.ScanInterval)
	}
	d.cfg = cfg
	d.gen++
	d.lim.set(cfg.MaxConcurrent, cfg.MaxPerHour, len(cfg.Rules))
	d.keep.Store(int64(cfg.Keep))
	d.cmdlineBytes = cmdlineBytes(cfg)
	d.quota.setLimit(cfg.DiskQuota)
	if cfg.ProfileBudget != old.ProfileBudget {
		d.budget.set(cfg.ProfileBudget)
	}
	kept, restarted, stopped := 0, 0, 0
	for _, t := range d.targets {
		r := d.match(&t.facts)
		switch {
		case r != nil && r.Name == t.rule.Name && reflect.DeepEqual(r.Watch, t.rule.Watch):
			kept++ // t.rule stays: its watch is the same, and its goroutines read it
		case r != nil:
			// Watched again under its new rule once the old watchdog's
			// capture in progress is written (Run takes the release).
			d.retire(t, "its rule changed")
			restarted++
		default:
			d.retire(t, "no rule selects it now")
			stopped++
		}
	}
	d.watchPIDFiles()
	d.log.Info("configuration reloaded", "config", cfg.File, "rules", len(cfg.Rules), "kept", kept, "restarted", restarted, "stopped", stopped)
	d.scan()
	d.notifyReady()
}

// forget drops a target from the targets watched.
func (d *Daemon) forget(t *target) {
	delete(d.targets, t.facts.PID)
	d.budget.gone(t.facts.PID)
	d.lim.watching(t.facts.UID, -1)
	d.forkParents = true
}

// tellForkParents has the process connector report the processes that
// watched ones fork (a prefork server's workers execute nothing, and a
// scan would find them only every backstop interval).
func (d *Daemon) tellForkParents() {
	if d.conn == nil {
		d.newParents = nil
		return
	}
	if !d.forkParents {
		return
	}
	d.forkParents = false
	pids := make([]int, 0, len(d.targets))
	for pid := range d.targets {
		pids = append(pids, pid)
	}
	if err := d.conn.SetForkParents(pids); err != nil {
		d.log.Warn("the process connector will not report the forks of watched processes; the scan finds them", "err", err)
	}
	// What they forked before the connector was told.
	parents := d.newParents
	d.newParents = nil
	now := time.Now()
	for _, p := range parents {
		for _, kid := range children(p) {
			d.consider(kid, now, true)
		}
	}
}

// children lists the processes pid forked that still run
// (/proc/PID/task/TID/children of each of its threads).
func children(pid int) []int {
	tids, err := procfs.Threads(pid)
	if err != nil {
		return nil
	}
	var out []int
	for _, tid := range tids {
		b, err := procfs.ReadLimited(procfs.TaskPath(pid, tid, "children"), 1<<20)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && n > 0 {
				out = append(out, n)
			}
		}
	}
	return out
}

// targetEnded forgets a target whose watchdog returned.
func (d *Daemon) targetEnded(t *target) {
	if d.targets[t.facts.PID] != t {
		return // stopped by a reload, and already replaced
	}
	d.retire(t, "") // a new process may have its pid: looked at once released
}

// retire stops a target off Run's goroutine: its watchdog is told to
// stop (a capture in progress is cut short), and once it returned and
// its capture was written, everything it held is closed and Run hears of
// it (released) — a capture of a 300-thread target cut short takes
// seconds, in which exec events, control requests and systemd's pings
// must not wait.
func (d *Daemon) retire(t *target, why string) {
	pid := t.facts.PID
	if why != "" {
		t.log.Info("no longer watching", "why", why)
	}
	t.cancel()
	d.forget(t)
	d.stopping[pid] = true
	d.releases.Add(1)
	go func() {
		defer d.releases.Done()
		<-t.done
		t.release()
		select {
		case d.released <- pid:
		case <-d.closing:
		}
	}()
}

// closeAll stops every target and waits for them, then closes what the
// daemon holds.
func (d *Daemon) closeAll() {
	close(d.closing)
	var wg sync.WaitGroup
	for _, t := range d.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.stopTarget(t, "stallwatch is stopping")
		}()
	}
	wg.Wait()
	d.releases.Wait()
	d.targets = nil
	if d.ctl != nil {
		d.ctl.close()
	}
	d.taps.Close()
	d.state.close()
	d.quota.close()
}

// stopTarget stops a target's watchdog and waits for it (a capture in
// progress is cut short and written).
func (d *Daemon) stopTarget(t *target, why string) {
	t.log.Info("no longer watching", "why", why)
	t.cancel()
	<-t.done
	t.release()
}

// cmdlineBytes is how much of a command line the daemon reads: what the
// rules' cmdline patterns need, and enough to show in logs and status.
func cmdlineBytes(cfg *Config) int {
	var patterns []*regexp.Regexp
	for i := range cfg.Rules {
		if re := cfg.Rules[i].Select.Cmdline; re != nil {
			patterns = append(patterns, re)
		}
	}
	return max(cmdlineNeed(patterns), 4096)
}

// logExecOverflow says, at most once a minute, how many exec events were
// over the budget (left to the next scan).
func (d *Daemon) logExecOverflow(now time.Time) {
	b := &d.execBudget
	if b.unlogged == 0 || now.Sub(b.logged) < time.Minute {
		return
	}
	d.log.Warn("more processes started than the daemon looks at a second: left to the next scan of /proc",
		"processes", b.unlogged, "total", b.over, "bound", fmt.Sprintf("%d a second, %d MiB of command lines", execsPerSecond, execBytesPerSecond>>20))
	b.unlogged, b.logged = 0, now
}
