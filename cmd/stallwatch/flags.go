package main

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/logfmt"
	"github.com/stallwatch/stallwatch/internal/preflight"
)

// The flag sets several commands share. Each is declared once, here, so
// that a setting has one name and one meaning in watch, record and the
// daemon's rules.

// declarePID declares -p, --pid.
func declarePID(fs *cli.FlagSet, p *int, usage string) {
	f := fs.Int(p, "pid", 0, usage).Alias("p").Completes(cli.PID)
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
}

func (c *captureFlags) declare(fs *cli.FlagSet) {
	fs.Group("Capture")
	fs.Int(&c.freq, "freq", capture.DefaultFreq, "sample each thread `HZ` times a second of its CPU time")
	fs.Bool(&c.noOffCPU, "no-offcpu", "do not sample off-CPU (blocked) time; needs less privilege")
	fs.Bool(&c.noKernel, "no-kernel", "leave kernel frames out of stacks; needs less privilege")
	fs.Bool(&c.noPtrace, "no-ptrace", "never stop a thread: the snapshot reads the stacks of blocked threads from /proc only")
}

func (c *captureFlags) check() error {
	if c.freq <= 0 {
		return cli.UsageErrorf("--freq %d: must be positive", c.freq)
	}
	return nil
}

// apply sets cfg's sampling from the flags.
func (c *captureFlags) apply(cfg *capture.Config) {
	cfg.Freq = c.freq
	cfg.NoOffCPU, cfg.NoKernel, cfg.NoPtrace = c.noOffCPU, c.noKernel, c.noPtrace
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

// outputFlags say where capture directories go.
type outputFlags struct {
	out  string
	keep int
}

func (o *outputFlags) declare(fs *cli.FlagSet) {
	fs.Group("Output")
	fs.String(&o.out, "out", capture.DefaultOut, "write capture directories under `DIR`").Completes(cli.Dir)
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

func (p *policyFlags) check() error {
	switch {
	case p.stallAfter <= 0:
		return cli.UsageErrorf("--stall-after %v: must be positive", p.stallAfter)
	case p.captureFor <= 0:
		return cli.UsageErrorf("--capture-for %v: must be positive", p.captureFor)
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

// logger returns the logger of a command: slog's text lines for watch,
// plain lines for the commands a person runs and reads (prefix names the
// command), JSON with --log-format json. quiet leaves warnings and
// errors only.
func (g *globals) logger(w io.Writer, prefix string, quiet bool) *slog.Logger {
	lvl := slog.LevelInfo
	if quiet {
		lvl = slog.LevelWarn
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
