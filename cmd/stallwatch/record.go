package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/preflight"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/report"
)

func recordCommand(g *globals) *cli.Command {
	f := &recordFlags{}
	return &cli.Command{
		Name:    "record",
		Summary: "sample a running process for a while and write a profile",
		Usage:   "-p PID [--duration DUR] [flags]",
		Help:    recordHelp,
		Flags:   f.declare,
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return record(ctx, inv, f, g)
		},
	}
}

const recordHelp = `
Samples every thread of a running process with perf_event_open: on-CPU
stacks (cpu-clock at --freq Hz per thread, kernel and user frames) and
off-CPU intervals (where each thread waited and for how long), with JIT
frames named from the target's jitdump or perf map. Writes a capture
directory (profile.pb.gz, capture.json, report.txt, report.html) and prints a
summary. Ctrl-C ends the recording early; what was recorded is written.
With an agent URL (--upload, DD_TRACE_AGENT_URL, DD_AGENT_HOST or the
agent's APM socket), the capture is uploaded to Datadog's profiler; if the
agent does not take it within 30 s it waits in OUT/.upload-queue.

Examples:
  stallwatch record -p 4242                     # 10 s, on- and off-CPU
  stallwatch record -p 4242 --duration 30s --no-offcpu
  dir=$(stallwatch record -p 4242 --quiet) && go tool pprof -top "$dir/profile.pb.gz"

Needs perf_event_open on another process: root, or CAP_PERFMON (kernel
frames and off-CPU: kernel.perf_event_paranoid <= 1 or CAP_PERFMON; kernel
symbol names: CAP_SYSLOG). Exit code 3 says what is missing and how to
grant it.`

type recordFlags struct {
	pid      int
	duration time.Duration
	snapshot bool
	quiet    bool
	capture  captureFlags
	output   outputFlags
	datadog  datadogFlags
}

func (f *recordFlags) declare(fs *cli.FlagSet) {
	declarePID(fs, &f.pid, "the process to record")
	fs.Duration(&f.duration, "duration", 10*time.Second, "how long to record")
	fs.Bool(&f.snapshot, "snapshot", "also take a thread snapshot (threads.pb.gz) at the start")
	fs.Bool(&f.quiet, "quiet", "print only the capture directory's path: no progress, no summary, no warnings (capture.json's notes keep them); errors only on standard error")
	f.capture.declare(fs)
	f.output.declare(fs, capture.DefaultOut)
	f.datadog.withQueue = true
	f.datadog.declare(fs)
}

func (f *recordFlags) check(inv *cli.Invocation) error {
	if err := checkPID(f.pid); err != nil {
		return err
	}
	if args := inv.Positional(); len(args) > 0 {
		return cli.UsageErrorf("unexpected argument %q", args[0])
	}
	if f.duration <= 0 {
		return cli.UsageErrorf("--duration %v: must be positive", f.duration)
	}
	if err := f.capture.check(); err != nil {
		return err
	}
	if err := f.datadog.check(); err != nil {
		return err
	}
	return f.output.check()
}

func record(ctx context.Context, inv *cli.Invocation, f *recordFlags, g *globals) error {
	if err := f.check(inv); err != nil {
		return err
	}
	f.output.settle(inv.Flags.Changed, os.Getenv)
	log := g.logger(inv.Stderr, "stallwatch record", f.quiet)
	needs := preflight.Needs{Verb: "record", PID: f.pid, Snapshot: f.snapshot, Out: f.output.out, OutFlag: "--out"}
	f.capture.needs(&needs)
	if err := startChecks(log, needs); err != nil {
		return err
	}
	stack, err := notify.Setup(f.datadog.options(filepath.Join(f.output.out, notify.QueueDirName), log))
	if err != nil {
		return err
	}
	defer stack.Close(0)
	cfg := capture.Config{PID: f.pid, Snapshot: f.snapshot, Logger: log}
	f.capture.apply(&cfg)
	f.output.apply(&cfg)
	log.Info(fmt.Sprintf("recording pid %d for %v at %d Hz (Ctrl-C stops early)", f.pid, f.duration, f.capture.freq))
	var progress func(capture.Progress)
	if !f.quiet {
		progress = progressPrinter(inv.Stderr, log, g.logFormat == "text" && isTerminal(inv.Stderr))
	}
	res, err := capture.Record(ctx, cfg, f.duration, progress)
	if err != nil {
		return err
	}
	if stack.Queue != nil {
		uploadNow(ctx, stack, res.Dir, log)
	}
	if f.quiet {
		_, err := fmt.Fprintln(inv.Stdout, res.Dir)
		return err
	}
	w := termsafe.NewWriter(inv.Stdout)
	if err := printSummary(ctx, w, res); err != nil {
		return err
	}
	return w.Flush()
}

// progressPrinter rewrites one status line on a terminal, and logs a line
// every few seconds elsewhere.
func progressPrinter(w io.Writer, log *slog.Logger, tty bool) func(capture.Progress) {
	return func(p capture.Progress) {
		if tty {
			fmt.Fprintf(w, "\r\033[K%5.1fs/%v  threads %d  on-CPU samples %d  off-CPU intervals %d  lost %d",
				p.Elapsed.Seconds(), p.Duration, p.Threads, p.Samples, p.OffCPU, p.Lost)
			if p.Elapsed >= p.Duration-time.Second/2 {
				fmt.Fprintln(w)
			}
			return
		}
		if int(p.Elapsed.Seconds())%5 == 0 {
			log.Info("recording", "elapsed", p.Elapsed.Round(100*time.Millisecond), "threads", p.Threads,
				"samples", p.Samples, "offcpu_intervals", p.OffCPU, "lost", p.Lost)
		}
	}
}

// printSummary prints the one-screen summary of a capture directory.
func printSummary(ctx context.Context, w io.Writer, res *model.Result) error {
	c, err := report.ReadCapture(ctx, res.Dir)
	if err != nil {
		return err
	}
	if err := report.WriteSummary(w, c); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nwritten to %s\n  go tool pprof -http=: %s/%s\n", res.Dir, res.Dir, capdir.FileProfile)
	return nil
}

// recordUploadWait is how long record waits for the agent to take its
// capture before leaving the upload queued.
const recordUploadWait = 30 * time.Second

// uploadNow queues the upload of dir and waits for it to be sent; one the
// agent does not take in time stays queued (the stack says so as it
// closes).
func uploadNow(ctx context.Context, stack *notify.Stack, dir string, log *slog.Logger) {
	it, err := notify.UploadItem(dir, nil)
	if err == nil {
		err = stack.Queue.Add(it)
	}
	if err != nil {
		log.Error("the capture could not be queued for upload; it stays on disk", "dir", dir, "err", err)
		return
	}
	wait, cancel := context.WithTimeout(ctx, recordUploadWait)
	defer cancel()
	if stack.Queue.Drain(wait) == 0 && !stack.Queue.Pending(it.Key) {
		if st := stack.Queue.Stats(); st.Refused+st.Dropped == 0 {
			log.Info("uploaded", "dir", dir, "agent", stack.Uploader.URL())
		}
	}
}
