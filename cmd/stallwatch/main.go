// Command stallwatch is a watchdog profiler for Linux processes that freeze.
// It watches a heartbeat the target gives off and, when the heartbeat stalls,
// captures what every thread is doing: on-CPU and off-CPU stacks with kernel
// and JIT frames, a snapshot of every thread and the lock it waits for.
//
// This package only wires: the command table (commands.go), flags,
// signals and exit codes. The work is done by the packages it imports.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/stallwatch/stallwatch/daemon"
	"github.com/stallwatch/stallwatch/internal/child"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/logfmt"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/preflight"
	"github.com/stallwatch/stallwatch/internal/termsafe"
)

// Exit codes, as the top-level help states them.
const (
	exitOK           = 0
	exitFailure      = 1
	exitUsage        = 2
	exitNotPermitted = 3
	// exitTargetExited: the process `watch --pid` watched exited. Not 0,
	// so that a unit with Restart=on-failure starts stallwatch again
	// (to watch the service's next process); not 1, so that a unit may
	// tell it from a failure (RestartPreventExitStatus=, SuccessExitStatus=).
	exitTargetExited = 4
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs one command line and returns its exit code.
func run(args []string, stdout, stderr io.Writer) int {
	// SIGINT and SIGTERM cancel the context: every command finishes what
	// it can (a recording cut short is still written) and returns.
	// `watch` takes the two signals over for a child it started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var g globals
	err := newApp(&g).Run(ctx, args, stdout, stderr)
	code := exitCode(err)
	var st exitStatus
	if err != nil && !errors.As(err, &st) {
		g.writeError(stderr, err, code)
	}
	return code
}

// ignoreSIGPIPE keeps a log on a closed pipe (watch … 2>&1 | head)
// from killing a command that must outlive it: the Go runtime ends the
// program on SIGPIPE from a write to descriptor 1 or 2 unless the signal
// is asked for, and asked for, the write fails with EPIPE instead. (Not
// signal.Ignore: an ignored SIGPIPE would be inherited by the child and
// the hooks, which must die of it as any program does.) Under systemd,
// SIGPIPE is a clean exit that Restart=on-failure would not restart.
func ignoreSIGPIPE() (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGPIPE)
	return func() { signal.Stop(c) }
}

// exitCode maps an error to the exit code, by its type.
func exitCode(err error) int {
	var st exitStatus
	var ue cli.UsageError
	var pe *perms.Error
	var pfe *preflight.Error
	var te *targetExitedError
	var ce *daemon.ConfigError
	var se *child.StartError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &st):
		return int(st)
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &pfe):
		switch {
		case pfe.NotPermitted():
			return exitNotPermitted
		case pfe.OnlySettings():
			return exitUsage
		}
	case errors.As(err, &pe):
		return exitNotPermitted
	case errors.As(err, &te):
		return exitTargetExited
	case errors.As(err, &ce):
		return exitUsage
	case errors.As(err, &se):
		return se.ExitCode() // 127 or 126, as a shell says of CMD
	}
	return exitFailure
}

// exitStatus is an exit code a command passes on without a message: the
// status of the child `watch -- CMD` ran.
type exitStatus int

func (s exitStatus) Error() string { return "exit status " + strconv.Itoa(int(s)) }

// targetExitedError ends `watch --pid` when its target exits.
type targetExitedError struct{ pid int }

func (e *targetExitedError) Error() string {
	return fmt.Sprintf("the watched process %d exited (exit status %d)", e.pid, exitTargetExited)
}

// globals are the flags every command takes.
type globals struct {
	logFormat string
}

func (g *globals) declare(fs *cli.FlagSet) {
	fs.Choice(&g.logFormat, "log-format", "text", logfmt.Formats, "messages on standard error as `FORMAT`: text or json (one object a line)")
}

// writeError prints the error that ends a command, in the log format.
func (g *globals) writeError(stderr io.Writer, err error, code int) {
	if g.logFormat == "json" {
		logfmt.New(stderr, logfmt.Options{Format: "json"}).Error(err.Error(), "exit_code", code)
		return
	}
	w := termsafe.NewWriter(stderr)
	cli.WriteError(w, err)
	_ = w.Flush()
}
