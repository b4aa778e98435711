package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/report"
)

func init() {
	register(command{
		name:    "record",
		summary: "sample a running process for a while and write a profile",
		run:     runRecord,
	})
}

const recordHelp = `
Samples every thread of a running process with perf_event_open: on-CPU
stacks (cpu-clock at --freq Hz per thread, kernel and user frames) and
off-CPU intervals (where each thread waited and for how long), with JIT
frames named from the target's jitdump or perf map. Writes a capture
directory (profile.pb.gz, capture.json, report.txt, report.html) and prints a
summary. Ctrl-C ends the recording early; what was recorded is written.

Examples:
  stallwatch record --pid 4242                     # 10 s, on- and off-CPU
  stallwatch record --pid 4242 --duration 30s --no-offcpu
  go tool pprof -top stallwatch-captures/*-4242-manual/profile.pb.gz

Needs perf_event_open on another process: root, or CAP_PERFMON (kernel
frames: kernel.perf_event_paranoid <= 1 or CAP_PERFMON; kernel symbol names:
CAP_SYSLOG). Exit code 3 says which is missing and how to grant it.`

func runRecord(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("record", "stallwatch record --pid PID [--duration 10s] [flags]", recordHelp, stderr)
	pid := fs.Int("pid", 0, "process to record (required)")
	dur := fs.Duration("duration", 10*time.Second, "how long to record")
	freq := fs.Int("freq", capture.DefaultFreq, "on-CPU samples per second, per thread")
	noOff := fs.Bool("no-offcpu", false, "do not record off-CPU intervals")
	noKernel := fs.Bool("no-kernel", false, "user frames only (needs less privilege)")
	snap := fs.Bool("snapshot", false, "also take a thread snapshot (threads.pb.gz) at the start")
	noPtrace := fs.Bool("no-ptrace", false, "with --snapshot: read stacks without stopping threads")
	out := fs.String("out", capture.DefaultOut, "directory to write the capture directory under")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pid <= 0 {
		return usagef("--pid is required")
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *dur <= 0 || *freq <= 0 {
		return usagef("--duration and --freq must be positive")
	}
	cfg := capture.Config{
		PID: *pid, Out: *out, Freq: *freq,
		NoOffCPU: *noOff, NoKernel: *noKernel, NoPtrace: *noPtrace, Snapshot: *snap,
	}
	fmt.Fprintf(stderr, "recording pid %d for %v at %d Hz (Ctrl-C stops early)\n", *pid, *dur, *freq)
	var progress func(capture.Progress)
	if !*quiet {
		progress = progressPrinter(stderr)
	}
	res, err := capture.Record(ctx, cfg, *dur, progress)
	if err != nil {
		return err
	}
	return printSummary(ctx, stdout, res)
}

// progressPrinter rewrites one status line on a terminal, and prints a line
// every few seconds elsewhere (logs).
func progressPrinter(w io.Writer) func(capture.Progress) {
	tty := isTerminal(w)
	return func(p capture.Progress) {
		line := fmt.Sprintf("%5.1fs/%v  threads %d  on-CPU samples %d  off-CPU intervals %d  lost %d",
			p.Elapsed.Seconds(), p.Duration, p.Threads, p.Samples, p.OffCPU, p.Lost)
		switch {
		case tty:
			fmt.Fprintf(w, "\r\033[K%s", line)
			if p.Elapsed >= p.Duration-time.Second/2 {
				fmt.Fprintln(w)
			}
		case int(p.Elapsed.Seconds())%5 == 0:
			fmt.Fprintln(w, line)
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printSummary prints the one-screen summary of a capture directory.
func printSummary(ctx context.Context, w io.Writer, res *capdir.Result) error {
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
