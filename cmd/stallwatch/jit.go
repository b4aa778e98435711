package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	"github.com/stallwatch/stallwatch/jit"
)

func jitCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:    "jit",
		Summary: "read the JIT symbol files of a process (jitdump, perf map)",
		Help:    jitHelp,
		Commands: []*cli.Command{
			jitInspectCommand(g),
			jitSymbolizeCommand(g),
			jitToMapCommand(g),
		},
	}
}

const jitHelp = `
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
  python3.12 -X perf app.py              perf map`

func jitInspectCommand(g *globals) *cli.Command {
	var format string
	return &cli.Command{
		Name:    "inspect",
		Summary: "what a jitdump or perf map holds, and its defects with their offsets",
		Usage:   "FILE [--format text|json]",
		Help: `
Reads a whole jitdump or perf map (told apart by the jitdump magic) and
prints its header, how many records of each type it holds, the time span
of the records, the largest pieces of code, and every defect with its file
offset: records whose sizes contradict themselves, a last record still
being written, garbage where a record should start.

The exit code is 1 when the file could not be read to its end.`,
		Flags: func(fs *cli.FlagSet) { declareFormat(fs, &format, "the summary") },
		Args:  cli.File,
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return jitInspect(inv, format == "json")
		},
	}
}

func jitInspect(inv *cli.Invocation, asJSON bool) error {
	pos := inv.Positional()
	if len(pos) != 1 {
		return cli.UsageErrorf("inspect takes one FILE, got %d", len(pos))
	}
	sum, err := jit.Inspect(pos[0], jit.Options{})
	if err != nil {
		return err
	}
	if asJSON {
		err = sum.WriteJSON(termsafe.NewJSONWriter(inv.Stdout))
	} else {
		w := termsafe.NewWriter(inv.Stdout)
		if err = sum.WriteText(w); err == nil {
			err = w.Flush()
		}
	}
	if err != nil {
		return err
	}
	if b := sum.Info.Broken; b != nil {
		return fmt.Errorf("%s: read stopped at offset %d: %s", sum.Path, b.Offset, b.Reason)
	}
	return nil
}

func jitSymbolizeCommand(g *globals) *cli.Command {
	var pid int
	var at uint64
	return &cli.Command{
		Name:    "symbolize",
		Summary: "which JIT code is at each address",
		Usage:   "-p PID [--at NS] ADDR...",
		Help: `
Finds the JIT symbol files of a running process (its jitdump through its
memory map, or the usual directories; its perf map in its /tmp) and prints
one line per address (hex, with or without 0x):

  ADDR NAME+OFFSET FILE:LINE (RUNTIME, RAW NAME, SOURCE FILE)

or "ADDR ?" when no JIT code is known there. By default the latest code at
each address answers; --at asks which code was there at a CLOCK_MONOTONIC
time in nanoseconds (JITs reuse memory). Files not owned by the target's
user or root, symbolic links and other non-regular files are refused, with
the reason on stderr.`,
		Flags: func(fs *cli.FlagSet) {
			declarePID(fs, &pid, "the process")
			fs.Uint64(&at, "at", 0, "the code live at CLOCK_MONOTONIC `NS` nanoseconds (default: the latest)")
		},
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return jitSymbolize(inv, pid, at, g)
		},
	}
}

func jitSymbolize(inv *cli.Invocation, pid int, at uint64, g *globals) error {
	if err := checkPID(pid); err != nil {
		return err
	}
	pos := inv.Positional()
	if len(pos) == 0 {
		return cli.UsageErrorf("give at least one address")
	}
	addrs := make([]uint64, len(pos))
	for i, a := range pos {
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(a, "0x"), "0X"), 16, 64)
		if err != nil {
			return cli.UsageErrorf("address %q is not a hex number", a)
		}
		addrs[i] = v
	}
	p, err := jit.OpenProcess(pid, jit.Options{})
	if err != nil {
		return err
	}
	defer p.Close()
	reportSources(p, g.logger(inv.Stderr, "stallwatch jit symbolize", false))
	ix := p.Index()
	w := termsafe.NewWriter(inv.Stdout)
	for _, a := range addrs {
		var s *jit.Symbol
		var ok bool
		if at != 0 {
			s, ok = ix.LookupAt(a, at)
		} else {
			s, ok = ix.Lookup(a)
		}
		if !ok {
			fmt.Fprintf(w, "%#x ?\n", a)
			continue
		}
		where := ""
		if s.File != "" {
			where = " " + s.File
			if s.Line > 0 {
				where += ":" + strconv.Itoa(s.Line)
			}
		}
		// One line per address: a name may not break it.
		fmt.Fprintf(w, "%#x %s+%#x%s (%v, %s, %s)\n", a, termsafe.String(s.Display), a-s.Start,
			termsafe.String(where), s.Runtime, termsafe.String(s.Name), termsafe.String(s.Source))
	}
	return w.Flush()
}

// reportSources logs what was refused or wrong, and where we looked when
// nothing was found. It returns how many files are read.
func reportSources(p *jit.Process, log *slog.Logger) int {
	read := 0
	for _, s := range p.Sources() {
		switch {
		case s.Refused:
			log.Warn(fmt.Sprintf("refused %s %s: %s", s.Kind, s.Path, s.Reason))
		case s.Broken != nil:
			read++
			log.Warn(fmt.Sprintf("%s: %v (read up to there)", s.Kind, s.Broken))
		default:
			read++
		}
	}
	if read == 0 {
		log.Warn(fmt.Sprintf("no JIT symbol files for pid %d; looked at %s (run 'stallwatch jit --help' for how to turn them on)",
			p.Pid(), strings.Join(p.Searched(), ", ")))
	}
	return read
}

type tomapFlags struct {
	pid     int
	follow  bool
	output  string
	every   time.Duration
	display bool
}

func jitToMapCommand(g *globals) *cli.Command {
	f := &tomapFlags{}
	return &cli.Command{
		Name:    "tomap",
		Summary: "make a perf map of the jitdump, for tools that read only perf maps",
		Usage:   "-p PID [--follow] [-o PATH]",
		Help: `
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
process exits or stallwatch is interrupted (the map stays).`,
		Flags: func(fs *cli.FlagSet) {
			declarePID(fs, &f.pid, "the process")
			fs.Bool(&f.follow, "follow", "keep the map current until the process exits")
			fs.String(&f.output, "output", "", "write the map to `PATH` instead (a path in stallwatch's own file system)").Completes(cli.File)
			fs.Duration(&f.every, "interval", time.Second, "with --follow, how often to look for new code")
			fs.Bool(&f.display, "display-names", "write the names people read (fibonacci) instead of the runtime's (JS:*fibonacci /app/fib.js:1:1)")
		},
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return jitToMap(ctx, inv, f, g)
		},
	}
}

func jitToMap(ctx context.Context, inv *cli.Invocation, f *tomapFlags, g *globals) error {
	if err := checkPID(f.pid); err != nil {
		return err
	}
	if args := inv.Positional(); len(args) > 0 {
		return cli.UsageErrorf("unexpected arguments %q", args)
	}
	if f.every <= 0 {
		return cli.UsageErrorf("--interval must be positive")
	}
	log := g.logger(inv.Stderr, "stallwatch jit tomap", false)
	p, err := jit.OpenProcess(f.pid, jit.Options{NoPerfMap: true})
	if err != nil {
		return err
	}
	defer p.Close()
	if reportSources(p, log) == 0 && !f.follow {
		return fmt.Errorf("pid %d has no jitdump to make a map of (with --follow, stallwatch waits for one)", f.pid)
	}
	m, err := jit.OpenMapFile(f.pid, f.output)
	if err != nil {
		return err
	}
	defer m.Close()
	out := termsafe.NewWriter(inv.Stdout)
	var last *jit.Index
	write := func() error {
		ix := p.Index()
		if ix == last {
			return nil
		}
		n, err := m.Write(ix, f.display)
		if err != nil {
			return err
		}
		last = ix
		fmt.Fprintf(out, "wrote %d symbols to %s\n", n, m.Path)
		return nil
	}
	if err := write(); err != nil || !f.follow {
		return err
	}
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // the map on disk is whole: it stays
		case <-tick.C:
		}
		alive := procfs.Alive(f.pid)
		if err := p.Update(); err != nil && alive {
			log.Warn(err.Error())
		}
		if err := write(); err != nil {
			return err
		}
		if !alive {
			fmt.Fprintf(out, "pid %d exited\n", f.pid)
			return nil
		}
	}
}
