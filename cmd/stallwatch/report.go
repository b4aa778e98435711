package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/stallwatch/stallwatch/internal/safedir"
	reports "github.com/stallwatch/stallwatch/report"
)

func init() {
	register(command{
		name:    "report",
		summary: "render a capture directory or a profile as text, HTML or folded stacks",
		run:     runReport,
	})
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

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", "stallwatch report DIR|PROFILE [--format text|html|folded] [-o FILE] [--sample-type TYPE]", reportHelp, stderr)
	format := fs.String("format", "text", "`text`, html or folded")
	out := fs.String("o", "", "write to `FILE` (atomically) instead of standard output")
	sampleType := fs.String("sample-type", "", "folded: the value to sum, e.g. off-cpu-time (default: the profile's default)")
	pos, err := parseReportArgs(fs, args)
	if err != nil {
		return err
	}
	switch len(pos) {
	case 0:
		return usagef("a capture directory or a profile is required")
	case 1:
	default:
		return usagef("one capture directory or profile, not %d (%s)", len(pos), strings.Join(pos, " "))
	}
	switch *format {
	case "text", "html", "folded":
	default:
		return usagef("--format must be text, html or folded, not %q", *format)
	}
	if *sampleType != "" && *format != "folded" {
		return usagef("--sample-type applies to --format folded")
	}
	c, err := reports.Open(ctx, pos[0])
	if err != nil {
		return err
	}
	if *out != "" && c.ReadFrom(*out) {
		return usagef("-o %s is a file the report is read from: it would be replaced; write elsewhere", *out)
	}
	render := func(w io.Writer) error {
		w = ctxWriter{ctx, w} // SIGINT and SIGTERM stop a long rendering
		switch *format {
		case "html":
			return reports.WriteHTML(w, c)
		case "folded":
			if c.Profile == nil {
				return errors.New("a thread dump has no profile to fold; use its threads.pb.gz")
			}
			return reports.WriteFolded(w, c.Profile, *sampleType)
		}
		return reports.WriteText(w, c)
	}
	if *out == "" {
		return render(stdout)
	}
	return safedir.WriteFileAt(*out, 0o644, render)
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

// parseReportArgs parses flags that may come before or after the
// positional arguments ("report DIR --format html") and returns those.
func parseReportArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil // "--" ends the flags
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
