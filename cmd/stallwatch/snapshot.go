package main

import (
	"context"
	"fmt"
	"io"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/preflight"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	reports "github.com/stallwatch/stallwatch/report"
	"github.com/stallwatch/stallwatch/snapshot"
)

func snapshotCommand(g *globals) *cli.Command {
	f := &snapshotFlags{}
	return &cli.Command{
		Name:    "snapshot",
		Summary: "dump each thread: state, stacks, who holds the lock it waits for",
		Usage:   "-p PID [--out DIR] [--format text|json] [--no-ptrace]",
		Help:    snapshotHelp,
		Flags:   f.declare,
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return runSnapshot(ctx, inv, f, g)
		},
	}
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

type snapshotFlags struct {
	pid      int
	out      string
	format   string
	noPtrace bool
}

func (f *snapshotFlags) declare(fs *cli.FlagSet) {
	declarePID(fs, &f.pid, "the process to snapshot")
	fs.String(&f.out, "out", "", "also write a capture directory under `DIR`").Completes(cli.Dir)
	declareFormat(fs, &f.format, "the snapshot")
	fs.Bool(&f.noPtrace, "no-ptrace", "never stop a thread: user stacks of blocked threads from /proc only")
}

func runSnapshot(ctx context.Context, inv *cli.Invocation, f *snapshotFlags, g *globals) error {
	if args := inv.Positional(); len(args) > 0 {
		return cli.UsageErrorf("unexpected argument %q", args[0])
	}
	if err := checkPID(f.pid); err != nil {
		return err
	}
	log := g.logger(inv.Stderr, "stallwatch snapshot", false)
	needs := preflight.Needs{Verb: "snapshot", PID: f.pid, Snapshot: true, Ptrace: !f.noPtrace}
	if f.out != "" {
		needs.Out, needs.OutFlag = f.out, "--out"
	}
	if err := startChecks(log, needs); err != nil {
		return err
	}
	snap, err := snapshot.Take(ctx, f.pid, snapshot.Options{NoPtrace: f.noPtrace})
	if err != nil {
		return err
	}
	if snap.PtraceErr != nil {
		log.Warn(fmt.Sprintf("without ptrace stops: %v", snap.PtraceErr))
	}
	if f.out != "" {
		res, err := capture.WriteSnapshot(capture.Config{Out: f.out, NoPtrace: f.noPtrace}, snap)
		if err != nil {
			return err
		}
		log.Info("wrote " + res.Dir)
	}
	if err := writeSnapshot(inv.Stdout, snap, f.format); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: the snapshot above is incomplete")
	}
	return nil
}

// writeSnapshot prints the snapshot, escaping what the target named.
func writeSnapshot(w io.Writer, snap *snapshot.Snapshot, format string) error {
	write, tw := reports.WriteThreadDump, termsafe.NewWriter(w)
	if format == "json" {
		write, tw = reports.WriteThreadDumpJSON, termsafe.NewJSONWriter(w)
	}
	if err := write(tw, snap); err != nil {
		return err
	}
	return tw.Flush()
}
