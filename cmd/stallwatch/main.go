// Command stallwatch is a watchdog profiler for Linux processes that freeze.
// It watches a heartbeat the target gives off and, when the heartbeat stalls,
// captures what every thread is doing: on-CPU and off-CPU stacks with kernel
// and JIT frames, a snapshot of every thread and the lock it waits for.
//
// This package only wires: flags, signals and exit codes. The work is done by
// the packages it imports.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/stallwatch/stallwatch/internal/perms"
)

// Exit codes, as the README ("Commands") documents them.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitNotPermd = 3
)

// command is one subcommand; each lives in a file of its own.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

// usageError is bad usage: exit code 2, with the subcommand's help.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stallwatch: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return exitUsage
	}
	// SIGINT/SIGTERM cancel the context: every command finishes what it
	// can (a recording is cut short but still written) and returns.
	// `watch` installs its own handling on top.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.run(ctx, args[1:], stdout, stderr)
	return exitCode(err, c.name, stderr)
}

// exitCode prints err and maps it to an exit code.
func exitCode(err error, name string, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "stallwatch %s: %v\nRun 'stallwatch %s --help' for usage.\n", name, err, name)
		return exitUsage
	}
	fmt.Fprintf(stderr, "stallwatch %s: %v\n", name, err)
	var pe *perms.Error
	if errors.As(err, &pe) {
		return exitNotPermd
	}
	return exitFailure
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `stallwatch watches a process's heartbeat and, when it stalls, captures what
every thread is doing: on-CPU and off-CPU stacks with kernel and JIT frames,
a snapshot of every thread and the lock it waits for, as a report and a pprof
profile.

Usage:
  stallwatch <command> [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
Run 'stallwatch <command> --help' for a command's flags.

Exit codes: 0 done, 1 failure, 2 bad usage, 3 not permitted (the message
names the missing capability or sysctl and the command that grants it).
`)
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints help made of the usage line, a description and the flags.
func newFlagSet(name, usageLine, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: %s\n\n%s\n\nFlags:\n", usageLine, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; a parse error is a usage error (exit 2) and
// --help is a clean exit.
//
// The flag package prints the whole help on any error; a typo deserves one
// line, so help is printed only when asked for.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(out)
			fs.Usage()
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}
