package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
)

// Capture is everything one capture directory holds, ready to render.
type Capture struct {
	Info    model.Info       // capture.json
	Profile *profile.Profile // profile.pb.gz; nil writes an empty, valid profile
	Threads *model.Snapshot  // threads.pb.gz, threads.json; may be nil

	// tab is the profile as the renderings read it: built from the
	// samples (SetSamples), else made from Profile once.
	tab    *table
	inputs []fileID // the files it was read from (ReadFrom)
}

// SetSamples makes the capture's profile from symbolized samples, as
// BuildProfile does, in the form every rendering reads (a table of its
// distinct stacks and label sets and its samples as columns): the
// profile.pb.gz CaptureFiles writes, the findings' samples (Samples) and
// the reports. Profile stays nil; CaptureProfile makes it when asked.
func (c *Capture) SetSamples(samples []model.Sample, meta model.Meta) error {
	t, err := buildTable(samples, meta)
	if err != nil {
		return err
	}
	c.Profile, c.tab = nil, t
	return nil
}

// SetTable makes the capture's profile from what tb was given, as
// SetSamples does from a slice of the same samples; tb was started for
// meta.Period, and is not to be used after.
func (c *Capture) SetTable(tb *TableBuilder, meta model.Meta) error {
	t, err := tb.table(meta)
	if err != nil {
		return err
	}
	c.Profile, c.tab = nil, t
	return nil
}

// Samples is the capture's samples read back into the capture model, as
// Samples reads them from its profile.pb.gz: what the findings are drawn
// from (package analysis).
func (c *Capture) Samples() (*model.Profile, error) {
	t, err := c.table()
	if err != nil {
		return nil, err
	}
	return t.model(), nil
}

// viewTable is the table of a capture with a profile, nil for one
// without (a thread dump alone).
func (c *Capture) viewTable() *table {
	if c.Profile == nil && c.tab == nil {
		return nil
	}
	t, err := c.table()
	if err != nil {
		return nil
	}
	return t
}

// table is the capture's profile as the renderings read it, made once.
func (c *Capture) table() (*table, error) {
	if c.tab != nil && (c.Profile == nil || c.Profile == c.tab.p) {
		return c.tab, nil
	}
	if c.Profile == nil {
		t, err := buildTable(nil, c.emptyMeta())
		if err != nil {
			return nil, err
		}
		c.tab = t
		return t, nil
	}
	c.tab = tableOf(c.Profile)
	return c.tab, nil
}

// Title is what the report's first line says of the capture.
func (c *Capture) Title() string { return titleOf(c) }

// CaptureFiles renders every file of a capture directory but capture.json
// — profile.pb.gz, threads.pb.gz and threads.json (with a snapshot),
// report.txt, report.html — for capdir.Root.Write. The reports say the
// findings c.Info holds (package analysis draws them); they are laid out
// once, here.
func CaptureFiles(c *Capture) ([]capdir.File, error) {
	if c == nil {
		return nil, fmt.Errorf("report: CaptureFiles: nil capture")
	}
	built := c.Profile == nil // by SetSamples, or an empty one now
	t, err := c.table()
	if err != nil {
		return nil, err
	}
	write := func(w io.Writer) error { return writeTableGzip(w, t) }
	if !built {
		// A profile read or made elsewhere is written as it is, every
		// label kept.
		p := c.Profile
		write = func(w io.Writer) error { return WriteProfile(w, p) }
	}
	files := []capdir.File{{Name: capdir.FileProfile, Write: write}}
	if c.Threads != nil {
		tp, err := BuildThreads(c.Threads)
		if err != nil {
			return nil, err
		}
		snap := c.Threads
		files = append(files,
			capdir.File{Name: capdir.FileThreads, Write: func(w io.Writer) error { return WriteProfile(w, tp) }},
			capdir.File{Name: capdir.FileThreadJSON, Write: func(w io.Writer) error { return model.WriteSnapshotJSON(w, snap) }})
	}
	return append(files, reportFiles(buildView(c))...), nil
}

// CaptureProfile is the profile.pb.gz of c: its Profile, or for a capture
// without one (a snapshot alone, a capture cut before sampling) an empty,
// valid profile that still says what the capture is.
func CaptureProfile(c *Capture) (*profile.Profile, error) {
	if c.Profile != nil {
		return c.Profile, nil
	}
	if c.tab != nil {
		return c.tab.Profile(), nil
	}
	return BuildProfile(nil, c.emptyMeta())
}

// emptyMeta is what the profile of a capture without samples says.
func (c *Capture) emptyMeta() model.Meta {
	return model.Meta{Start: c.Info.Start, Duration: c.Info.End.Sub(c.Info.Start), Comments: InfoComments(&c.Info)}
}

// ReportFiles renders report.txt and report.html of c again, for
// capdir.Root.Update after capture.json changed.
func ReportFiles(c *Capture) []capdir.File { return reportFiles(buildView(c)) }

func reportFiles(v *view) []capdir.File {
	return []capdir.File{
		{Name: capdir.FileText, Write: func(w io.Writer) error { return writeTextView(w, v) }},
		{Name: capdir.FileHTML, Write: func(w io.Writer) error { return writeHTMLView(w, v) }},
	}
}

// InfoComments states a capture's facts as profile comments, so that a
// profile.pb.gz read without its directory (`go tool pprof -comments`, or
// Datadog) still says what it is.
func InfoComments(info *model.Info) []string {
	var c []string
	add := func(format string, args ...any) { c = append(c, fmt.Sprintf(format, args...)) }
	if info.Trigger != "" {
		s := "stallwatch capture: trigger " + string(info.Trigger)
		if !info.TriggerAt.IsZero() {
			s += " at " + info.TriggerAt.UTC().Format(time.RFC3339Nano)
		}
		if info.Reason != "" {
			s += ": " + info.Reason
		}
		c = append(c, s)
	}
	if info.PID != 0 {
		add("pid %d", info.PID)
	}
	if len(info.Command) > 0 {
		add("command: %s", strings.Join(info.Command, " "))
	}
	if info.Heartbeat != "" {
		add("heartbeat: %s", info.Heartbeat)
	}
	if info.StallFor > 0 {
		add("heartbeat silent for %s at the trigger", info.StallFor)
	}
	if info.Kernel != "" {
		add("kernel %s", info.Kernel)
	}
	n := info.Counts
	add("samples: %d on-CPU, %d off-CPU intervals (%d before the trigger); threads: %d", n.Samples, n.OffCPU, n.SamplesBefore, n.Threads)
	add("lost: %d records, %d samples; throttled %d times", n.Lost, n.LostSamples, n.Throttled)
	if info.CutShort {
		add("cut short: %s", info.CutShortWhy)
	}
	if info.TargetExited {
		add("the target exited during the capture")
	}
	for _, note := range info.Notes {
		add("note: %s", note)
	}
	if info.Version != "" {
		add("stallwatch %s", info.Version)
	}
	return c
}
