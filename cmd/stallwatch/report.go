package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/analysis"
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	"github.com/stallwatch/stallwatch/model"
	reports "github.com/stallwatch/stallwatch/report"
)

func reportCommand(g *globals) *cli.Command {
	f := &reportFlags{}
	return &cli.Command{
		Name:    "report",
		Summary: "render a capture or profile: text, HTML, folded stacks, speedscope",
		Usage:   "DIR|PROFILE [--format text|html|folded|speedscope] [-o FILE] [--sample-type TYPE] [--phase before|during]",
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
  html    report.html: the findings with links to the threads and
          functions they name, a timeline of every thread (on a CPU,
          runnable but waiting, blocked; the trigger and the recovery
          marked; drag to pick a time range), a flame graph with zoom,
          search and on-CPU / off-CPU / wall time before or during the
          stall, and the thread dump. One self-contained file: no network
          needed to open it.
  folded  one line per stack, "thread;root;caller;leaf VALUE", for
          flamegraph.pl, speedscope or inferno, as stackcollapse-perf.pl
          writes it with --tid --kernel --jit: the thread first
          ("name-pid/tid"), kernel frames ending in _[k], JIT frames in
          _[j]. --sample-type picks the value, --phase the samples.
  speedscope
          speedscope's JSON file format (https://www.speedscope.app), one
          profile per thread in time order; --sample-type and --phase as
          for folded.

Sample types of profile.pb.gz: cpu-samples, cpu-time, off-cpu-time,
wall-time (on- plus off-CPU, the default). threads.pb.gz has threads.

Examples:
  stallwatch report stallwatch-captures/20260105T143012.345Z-4242-stall
  stallwatch report DIR --format html -o stall.html
  stallwatch report DIR --format folded --sample-type off-cpu-time | flamegraph.pl > off.svg
  stallwatch report DIR --format folded --phase during | grep '_\[k\]'
  stallwatch report DIR --format speedscope -o stall.speedscope.json

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
	phase      string
	from, to   string
}

func (f *reportFlags) declare(fs *cli.FlagSet) {
	fs.Choice(&f.format, "format", "text", []string{"text", "html", "folded", "speedscope"}, "render as `FORMAT`: text, html, folded or speedscope")
	fs.String(&f.output, "output", "", "write to `FILE` (atomically) instead of standard output").Completes(cli.File)
	fs.String(&f.sampleType, "sample-type", "", "with --format folded or speedscope: the value to sum, e.g. off-cpu-time (default: the profile's default)").
		Completes(cli.Words("wall-time", "cpu-time", "cpu-samples", "off-cpu-time", "threads"))
	fs.String(&f.phase, "phase", "", "with --format folded or speedscope: only the samples of `PHASE`, before (the flight recorder) or during (after the trigger)").
		Completes(cli.Words("before", "during"))
	fs.String(&f.from, "from", "", "with a directory of continuous profiles: from `TIME`, RFC 3339 or a duration before now (90m; default an hour before --to)")
	fs.String(&f.to, "to", "", "with a directory of continuous profiles: up to `TIME` (default now)")
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
	export := f.format == "folded" || f.format == "speedscope"
	if f.sampleType != "" && !export {
		return cli.UsageErrorf("--sample-type applies to --format folded and speedscope")
	}
	if f.phase != "" && !export {
		return cli.UsageErrorf("--phase applies to --format folded and speedscope")
	}
	opt := reports.ExportOptions{SampleType: f.sampleType, Phase: f.phase}
	var c *reports.Capture
	var err error
	if continuous.IsProfiles(pos[0]) {
		c, err = openProfiles(ctx, pos[0], f.from, f.to, time.Now())
	} else if f.from != "" || f.to != "" {
		return cli.UsageErrorf("--from and --to go with a directory of continuous profiles (OUT/profiles or OUT/profiles/PID-PROCESS), not %s", pos[0])
	} else {
		c, err = reports.Open(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if c.Info.Schema == 0 {
		// A profile or a thread dump read alone has no capture.json to
		// say its findings: they are drawn here, as a capture draws them.
		var p *model.Profile
		if c.Profile != nil {
			p = reports.Samples(c.Profile)
		}
		analysis.Analyze(&c.Info, p, c.Threads).Into(&c.Info)
	}
	if f.output != "" && c.ReadFrom(f.output) {
		return cli.UsageErrorf("-o %s is a file the report is read from: it would be replaced; write elsewhere", f.output)
	}
	render := func(w io.Writer) error {
		w = ctxWriter{ctx, w} // SIGINT and SIGTERM stop a long rendering
		switch f.format {
		case "html":
			return reports.WriteHTML(w, c)
		case "folded", "speedscope":
			if c.Profile == nil {
				return errors.New("a thread dump has no profile to export; use its threads.pb.gz")
			}
			if f.format == "speedscope" {
				return reports.WriteSpeedscope(w, c.Profile, c.Title(), opt)
			}
			return reports.WriteFolded(w, c.Profile, opt)
		}
		return reports.WriteText(w, c)
	}
	// What the target named (threads, functions, files) is escaped
	// wherever the output goes: a report file is read on a terminal too.
	safe := func(w io.Writer) error {
		tw := termsafe.NewWriter(w)
		if f.format == "speedscope" || f.format == "html" {
			// JSON's escapes (\u009b), valid in a JSON document and in
			// the JSON the page carries, and readable in its text.
			tw = termsafe.NewJSONWriter(w)
		}
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
	var pe *reports.PhaseError
	if errors.As(err, &pe) {
		return cli.UsageError{Msg: "--phase: " + pe.Error()}
	}
	return err
}

// openProfiles reads the continuous profiles under dir from from to to
// (each RFC 3339, or a duration before now: 90m; by default the hour
// before now) merged, as a capture to render.
func openProfiles(ctx context.Context, dir, from, to string, now time.Time) (*reports.Capture, error) {
	end, err := parseWhen("--to", to, now, now)
	if err != nil {
		return nil, err
	}
	start, err := parseWhen("--from", from, now, end.Add(-time.Hour))
	if err != nil {
		return nil, err
	}
	if !start.Before(end) {
		return nil, cli.UsageErrorf("--from %s is not before --to %s", start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	}
	r, err := continuous.Range(ctx, dir, start, end)
	if err != nil {
		return nil, err
	}
	c := &reports.Capture{Profile: r.Profile}
	c.Info.Trigger, c.Info.Start, c.Info.End = model.Continuous, r.From, r.To
	threads := map[string]bool{}
	for _, s := range r.Profile.Sample {
		if s.Label[model.LabelOffCPU] != nil {
			c.Info.Counts.OffCPU++
		} else if len(s.Value) > 0 {
			c.Info.Counts.Samples += int(s.Value[0])
		}
		if tid := s.Label[model.LabelThreadID]; len(tid) > 0 {
			threads[tid[0]] = true
		}
	}
	c.Info.Counts.Threads = len(threads)
	c.Info.Counts.JITSources = len(r.JITSources)
	if len(r.PIDs) == 1 {
		c.Info.PID = r.PIDs[0]
	}
	if r.Command != "" {
		c.Info.Command = strings.Fields(r.Command)
	}
	c.Info.Notes = append([]string{fmt.Sprintf("continuous profile: %d periods under %s merged, from %s to %s", len(r.Files), dir,
		r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339))}, r.Notes...)
	return c, nil
}

// parseWhen reads a time of --from or --to: RFC 3339, or a duration
// before now; def when empty.
func parseWhen(flag, s string, now, def time.Time) (time.Time, error) {
	if s == "" {
		return def, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, cli.UsageErrorf("%s %q: a time (2026-11-30T17:00:00Z) or a duration before now (90m)", flag, s)
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
