package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/preflight"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	"github.com/stallwatch/stallwatch/model"
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
	marks := stopMarksDir(os.Geteuid(), os.Getenv)
	book := loadStopMarks(marks, f.pid, log)
	snap, err := snapshot.Take(ctx, f.pid, snapshot.Options{NoPtrace: f.noPtrace, Stops: book})
	if err != nil {
		return err
	}
	saveStopMarks(marks, f.pid, book, log)
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
func writeSnapshot(w io.Writer, snap *model.Snapshot, format string) error {
	write, tw := reports.WriteThreadDump, termsafe.NewWriter(w)
	if format == "json" {
		write, tw = model.WriteSnapshotJSON, termsafe.NewJSONWriter(w)
	}
	if err := write(tw, snap); err != nil {
		return err
	}
	return tw.Flush()
}

// stopMarksDir is where snapshot keeps, from one run to the next, since
// when the threads it stopped had been blocked: its stop wakes them, and
// the kernel then dates their time off the CPU from it (snapshot's
// StopBook). A runtime directory, emptied at boot as pids and start
// times are: $XDG_RUNTIME_DIR/stallwatch/stops, else, as root,
// /run/stallwatch/stops; "" when there is none (a run then knows its own
// stops only). One file a process, removed by a later run once the
// process is gone.
func stopMarksDir(euid int, getenv func(string) string) string {
	if d := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "stallwatch", "stops")
	}
	if euid == 0 {
		return "/run/stallwatch/stops"
	}
	return ""
}

// maxStopMarks bounds a marks file (16 bytes and more a thread).
const maxStopMarks = 4 << 20

func stopMarksFile(pid int) string { return strconv.Itoa(pid) + ".json" }

// loadStopMarks reads the marks an earlier run left for pid. Without them
// a snapshot is still right, only blind to the earlier stop: a failure is
// logged at debug level.
func loadStopMarks(dir string, pid int, log *slog.Logger) *snapshot.StopBook {
	book := snapshot.NewStopBook()
	if dir == "" {
		return book
	}
	d, err := safedir.Open(dir) // only a directory no other user can write
	if err != nil {
		return book // none yet, or not to be trusted
	}
	defer d.Close()
	b, err := d.ReadFile(stopMarksFile(pid), maxStopMarks)
	if err == nil {
		err = book.Import(b)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Debug("earlier stop marks not read", "dir", dir, "err", err)
	}
	return book
}

// saveStopMarks keeps this run's marks for the next (see stopMarksDir).
func saveStopMarks(dir string, pid int, book *snapshot.StopBook, log *slog.Logger) {
	if dir == "" {
		return
	}
	b, err := book.Export(pid)
	if err != nil || b == nil {
		return // the process is gone, or no thread was left blocked by a stop
	}
	d, err := safedir.MkdirAll(dir, 0o700)
	if err != nil {
		log.Debug("stop marks not kept", "dir", dir, "err", err)
		return
	}
	defer d.Close()
	if err := d.WriteFile(stopMarksFile(pid), 0o600, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		log.Debug("stop marks not kept", "dir", dir, "err", err)
	}
	pruneStopMarks(d)
}

// pruneStopMarks removes the marks of processes that are gone.
func pruneStopMarks(d *safedir.Dir) {
	names, err := d.ReadDir()
	if err != nil {
		return
	}
	for _, n := range names {
		id, ok := strings.CutSuffix(n, ".json")
		pid, err := strconv.Atoi(id)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat(procfs.PidPath(pid, "stat")); errors.Is(err, fs.ErrNotExist) {
			_ = d.Remove(n)
		}
	}
}
