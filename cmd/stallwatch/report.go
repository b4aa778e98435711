package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	reports "github.com/stallwatch/stallwatch/report"
)

func reportCommand(g *globals) *cli.Command {
	f := &reportFlags{}
	return &cli.Command{
		Name:    "report",
		Summary: "render a capture or a profile as text, HTML or folded stacks",
		Usage:   "DIR|PROFILE [--format text|html|folded] [-o FILE] [--sample-type TYPE]",
		Help:    reportHelp,
		Flags:   f.declare,
		Args:    cli.File,
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return runReport(ctx, inv, f)
		},
	}
}

const reportHelp = `
Renders again what a capture wrote, with this version of stallwatch:

  DIR                 a capture directory (capture.json, profile.pb.gz,
                      threads.json or threads.pb.gz)
  PROFILE             any pprof file: profile.pb.gz, threads.pb.gz, or a
                      profile of another tool
  threads.json        a thread dump (stallwatch snapshot --format json)

Formats:
  text    report.txt: on the first screen the trigger, the stall, what was
          collected and lost, findings, the thread table and the top on-CPU
          and off-CPU stacks (before and during the stall); the details
          below it.
  html    report.html: the same with an icicle graph per section; one
          self-contained file, no network needed to open it.
  folded  one line per stack, "root;caller;leaf VALUE", for flamegraph.pl,
          speedscope or inferno. --sample-type picks the value.

Sample types of profile.pb.gz: cpu-samples, cpu-time, off-cpu-time,
wall-time (on- plus off-CPU, the default). threads.pb.gz has threads.

Examples:
  stallwatch report stallwatch-captures/20260105T143012.345Z-4242-stall
  stallwatch report DIR --format html -o stall.html
  stallwatch report DIR --format folded --sample-type off-cpu-time | flamegraph.pl > off.svg

The profiles are plain pprof; go tool pprof reads them as they are:
  go tool pprof -http=: DIR/profile.pb.gz              (browse; SAMPLE menu)
  go tool pprof -top -sample_index=cpu-time DIR/profile.pb.gz
  go tool pprof -traces -tagfocus=phase=during DIR/profile.pb.gz
  go tool pprof -top -tagfocus='thread id=^1234$' DIR/profile.pb.gz
  go tool pprof -traces -tagfocus='state=^D' DIR/threads.pb.gz`

type reportFlags struct {
	format     string
	output     string
	sampleType string
}

func (f *reportFlags) declare(fs *cli.FlagSet) {
	fs.Choice(&f.format, "format", "text", []string{"text", "html", "folded"}, "render as `FORMAT`: text, html or folded")
	fs.String(&f.output, "output", "", "write to `FILE` (atomically) instead of standard output").Alias("o").Completes(cli.File)
	fs.String(&f.sampleType, "sample-type", "", "with --format folded: the value to sum, e.g. off-cpu-time (default: the profile's default)").
		Completes(cli.Words("wall-time", "cpu-time", "cpu-samples", "off-cpu-time", "threads"))
}

func runReport(ctx context.Context, inv *cli.Invocation, f *reportFlags) error {
	pos := inv.Positional()
	switch len(pos) {
	case 0:
		return cli.UsageErrorf("a capture directory or a profile is required")
	case 1:
	default:
		return cli.UsageErrorf("one capture directory or profile, not %d (%s)", len(pos), strings.Join(pos, " "))
	}
	if f.sampleType != "" && f.format != "folded" {
		return cli.UsageErrorf("--sample-type applies to --format folded")
	}
	c, err := reports.Open(ctx, pos[0])
	if err != nil {
		return err
	}
	if f.output != "" && c.ReadFrom(f.output) {
		return cli.UsageErrorf("-o %s is a file the report is read from: it would be replaced; write elsewhere", f.output)
	}
	render := func(w io.Writer) error {
		w = ctxWriter{ctx, w} // SIGINT and SIGTERM stop a long rendering
		switch f.format {
		case "html":
			return reports.WriteHTML(w, c)
		case "folded":
			if c.Profile == nil {
				return errors.New("a thread dump has no profile to fold; use its threads.pb.gz")
			}
			return reports.WriteFolded(w, c.Profile, f.sampleType)
		}
		return reports.WriteText(w, c)
	}
	// What the target named (threads, functions, files) is escaped
	// wherever the output goes: a report file is read on a terminal too.
	safe := func(w io.Writer) error {
		tw := termsafe.NewWriter(w)
		if err := render(tw); err != nil {
			return err
		}
		return tw.Flush()
	}
	if f.output == "" {
		err = safe(inv.Stdout)
	} else {
		err = safedir.WriteFileAt(f.output, 0o644, safe)
	}
	var ste *reports.SampleTypeError
	if errors.As(err, &ste) {
		return cli.UsageError{Msg: "--sample-type: " + ste.Error()}
	}
	return err
}

// ctxWriter fails its writes once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, fmt.Errorf("interrupted: %w", context.Cause(c.ctx))
	}
	return c.w.Write(p)
}
