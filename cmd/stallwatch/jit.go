package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/jit"
)

func init() {
	register(command{
		name:    "jit",
		summary: "read the JIT symbol files of a process (jitdump, perf map)",
		run:     runJit,
	})
}

const jitHelp = `Usage: stallwatch jit <inspect|symbolize|tomap> [flags]

JIT compilers (Node.js/V8, Julia through LLVM, the JVM, .NET, Wasmtime,
CPython) publish the names of the code they generate in two formats:

  jitdump   jit-<pid>.dump, binary, with load times, moves, source lines.
            The runtime maps a page of it, so it is found through the
            process's memory map.
  perf map  /tmp/perf-<pid>.map, text lines "START SIZE name".

stallwatch reads both while the process runs; this command shows what it
reads. Turning them on:

  node --perf-prof app.js                jitdump in the working directory
  node --perf-basic-prof app.js          perf map
  ENABLE_JITPROFILING=1 julia app.jl     jitdump under ~/.debug/jit/
  java -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit ...
  jcmd <pid> Compiler.perfmap            perf map of a running JVM
  DOTNET_PerfMapEnabled=1 dotnet app.dll both, in /tmp
  python3.12 -X perf app.py              perf map

Commands:
  inspect FILE [--json]               what a jitdump or perf map holds and
                                      what is wrong with it (with offsets)
  symbolize --pid PID ADDR...         which JIT code is at each address
  tomap --pid PID [--follow] [-o PATH]
                                      write a perf map made from the
                                      process's jitdump, for tools that only
                                      read perf maps (perf, ddprof, bcc)

Run 'stallwatch jit <command> --help' for its flags.
`

func runJit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, jitHelp)
		return usagef("a command is needed: inspect, symbolize or tomap")
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, jitHelp)
		return nil
	case "inspect":
		return jitInspect(args[1:], stdout, stderr)
	case "symbolize":
		return jitSymbolize(args[1:], stdout, stderr)
	case "tomap":
		return jitToMap(ctx, args[1:], stdout, stderr)
	}
	return usagef("unknown command %q: inspect, symbolize or tomap", args[0])
}

// parseInterspersed parses flags placed before and after positional
// arguments ("inspect FILE --json").
func parseInterspersed(fs interface {
	Parse([]string) error
	Args() []string
}, args []string, parse func([]string) error) ([]string, error) {
	var pos []string
	for {
		if err := parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func jitInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("jit inspect", "stallwatch jit inspect FILE [--json]", `
Reads a whole jitdump or perf map (told apart by the jitdump magic) and
prints its header, how many records of each type it holds, the time span
of the records, the largest pieces of code, and every defect with its file
offset: records whose sizes contradict themselves, a last record still
being written, garbage where a record should start.

The exit code is 1 when the file could not be read to its end.`, stderr)
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	pos, err := parseInterspersed(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("inspect takes one FILE, got %d", len(pos))
	}
	sum, err := jit.Inspect(pos[0], jit.Options{})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(sum)
	} else {
		err = sum.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if b := sum.Info.Broken; b != nil {
		return fmt.Errorf("%s: read stopped at offset %d: %s", sum.Path, b.Offset, b.Reason)
	}
	return nil
}

func jitSymbolize(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("jit symbolize", "stallwatch jit symbolize --pid PID [--at NS] ADDR...", `
Finds the JIT symbol files of a running process (its jitdump through its
memory map, or the usual directories; its perf map in its /tmp) and prints
one line per address (hex, with or without 0x):

  ADDR NAME+OFFSET FILE:LINE (RUNTIME, RAW NAME, SOURCE FILE)

or "ADDR ?" when no JIT code is known there. By default the latest code at
each address answers; --at asks which code was there at a CLOCK_MONOTONIC
time in nanoseconds (JITs reuse memory). Files not owned by the target's
user or root, symbolic links and other non-regular files are refused, with
the reason on stderr.`, stderr)
	pid := fs.Int("pid", 0, "the process")
	at := fs.Uint64("at", 0, "CLOCK_MONOTONIC nanoseconds: the code live then (default: the latest)")
	pos, err := parseInterspersed(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	if *pid <= 0 {
		return usagef("--pid is required")
	}
	if len(pos) == 0 {
		return usagef("give at least one address")
	}
	addrs := make([]uint64, len(pos))
	for i, a := range pos {
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(a, "0x"), "0X"), 16, 64)
		if err != nil {
			return usagef("address %q is not a hex number", a)
		}
		addrs[i] = v
	}
	p, err := jit.OpenProcess(*pid, jit.Options{})
	if err != nil {
		return err
	}
	defer p.Close()
	reportSources(p, stderr)
	ix := p.Index()
	for _, a := range addrs {
		var s *jit.Symbol
		var ok bool
		if *at != 0 {
			s, ok = ix.LookupAt(a, *at)
		} else {
			s, ok = ix.Lookup(a)
		}
		if !ok {
			fmt.Fprintf(stdout, "%#x ?\n", a)
			continue
		}
		where := ""
		if s.File != "" {
			where = " " + s.File
			if s.Line > 0 {
				where += ":" + strconv.Itoa(s.Line)
			}
		}
		fmt.Fprintf(stdout, "%#x %s+%#x%s (%v, %s, %s)\n", a, s.Display, a-s.Start, where, s.Runtime, s.Name, s.Source)
	}
	return nil
}

// reportSources tells on stderr what was refused or wrong, and where we
// looked when nothing was found. It returns how many files are read.
func reportSources(p *jit.Process, stderr io.Writer) int {
	srcs := p.Sources()
	read := 0
	for _, s := range srcs {
		switch {
		case s.Refused:
			fmt.Fprintf(stderr, "refused %s %s: %s\n", s.Kind, s.Path, s.Reason)
		case s.Broken != nil:
			read++
			fmt.Fprintf(stderr, "%s: %v (read up to there)\n", s.Kind, s.Broken)
		default:
			read++
		}
	}
	if read == 0 {
		fmt.Fprintf(stderr, "no JIT symbol files for pid %d; looked at %s (run 'stallwatch jit --help' for how to turn them on)\n",
			p.Pid(), strings.Join(p.Searched(), ", "))
	}
	return read
}

func jitToMap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("jit tomap", "stallwatch jit tomap --pid PID [--follow] [-o PATH]", `
Writes a perf map (START SIZE name lines) of the code in a process's
jitdump, so that tools that read only perf maps — perf report, ddprof,
bcc's profile — name the code of runtimes that write only jitdumps (Julia,
Wasmtime, the JVM's perf agent).

The default PATH is /tmp/perf-<pid>.map inside the process's root (the pid
as the process sees it, in its pid namespace): where those tools look. The
file is written whole to a temporary file and renamed, so a reader never
sees half of it, and given to the process's user, the owner perf trusts.
A perf map the process writes itself is left alone.

With --follow it keeps the map current as the jitdump grows, until the
process exits or stallwatch is interrupted (the map stays).`, stderr)
	pid := fs.Int("pid", 0, "the process")
	follow := fs.Bool("follow", false, "keep the map current until the process exits")
	out := fs.String("o", "", "write the map here instead (a path in stallwatch's own file system)")
	every := fs.Duration("interval", time.Second, "with --follow, how often to look for new code")
	display := fs.Bool("display-names", false, "write the names people read (fibonacci) instead of the runtime's (JS:*fibonacci /app/fib.js:1:1)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pid <= 0 {
		return usagef("--pid is required")
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *every <= 0 {
		return usagef("--interval must be positive")
	}
	p, err := jit.OpenProcess(*pid, jit.Options{NoPerfMap: true})
	if err != nil {
		return err
	}
	defer p.Close()
	if reportSources(p, stderr) == 0 && !*follow {
		return fmt.Errorf("pid %d has no jitdump to make a map of (with --follow, stallwatch waits for one)", *pid)
	}
	m, err := jit.OpenMapFile(*pid, *out)
	if err != nil {
		return err
	}
	defer m.Close()
	var last *jit.Index
	write := func() error {
		ix := p.Index()
		if ix == last {
			return nil
		}
		n, err := m.Write(ix, *display)
		if err != nil {
			return err
		}
		last = ix
		fmt.Fprintf(stdout, "wrote %d symbols to %s\n", n, m.Path)
		return nil
	}
	if err := write(); err != nil || !*follow {
		return err
	}
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // the map on disk is whole: it stays
		case <-tick.C:
		}
		alive := procfs.Alive(*pid)
		if err := p.Update(); err != nil && alive {
			fmt.Fprintf(stderr, "%v\n", err)
		}
		if err := write(); err != nil {
			return err
		}
		if !alive {
			fmt.Fprintf(stdout, "pid %d exited\n", *pid)
			return nil
		}
	}
}
