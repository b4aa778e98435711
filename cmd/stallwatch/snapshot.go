package main

import (
	"context"
	"fmt"
	"io"

	"github.com/stallwatch/stallwatch/capture"
	reports "github.com/stallwatch/stallwatch/report"
	"github.com/stallwatch/stallwatch/snapshot"
)

func init() {
	register(command{
		name:    "snapshot",
		summary: "dump every thread of a process: state, stacks, who holds the lock it waits for",
		run:     runSnapshot,
	})
}

const snapshotHelp = `
Reads every thread of the process: its state, wait channel, system call,
context switches, run-queue delay, kernel stack and user stack, and for
threads waiting on a lock, which thread holds it. Deadlocks (threads that
wait for each other) and chains of waiting threads are shown first.

User stacks are read under a brief ptrace stop of one thread at a time,
which makes interruptible system calls that do not restart themselves
(epoll_wait, for one) return EINTR in the target. --no-ptrace reads them
without any stop, from /proc and the target's memory.

With --out, a capture directory (threads.pb.gz, threads.json, report.txt,
report.html, capture.json) is written under DIR as well.`

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("snapshot", "stallwatch snapshot --pid PID [--out DIR] [--format text|json] [--no-ptrace]", snapshotHelp, stderr)
	pid := fs.Int("pid", 0, "process to snapshot")
	out := fs.String("out", "", "also write a capture directory under `DIR`")
	format := fs.String("format", "text", "output on stdout: text or json")
	noPtrace := fs.Bool("no-ptrace", false, "never stop a thread: user stacks of blocked threads from /proc only")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *pid <= 0 {
		return usagef("--pid is required")
	}
	write := reports.WriteThreadDump
	switch *format {
	case "text":
	case "json":
		write = reports.WriteThreadDumpJSON
	default:
		return usagef("--format must be text or json, not %q", *format)
	}
	snap, err := snapshot.Take(ctx, *pid, snapshot.Options{NoPtrace: *noPtrace})
	if err != nil {
		return err
	}
	if snap.PtraceError != "" {
		fmt.Fprintf(stderr, "stallwatch snapshot: without ptrace stops: %s\n", snap.PtraceError)
	}
	if *out != "" {
		res, err := capture.WriteSnapshot(capture.Config{Out: *out, NoPtrace: *noPtrace}, snap)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "stallwatch snapshot: wrote %s\n", res.Dir)
	}
	if err := write(stdout, snap); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: the snapshot above is incomplete")
	}
	return nil
}
