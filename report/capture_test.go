package report

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
)

// writeCapture writes c under root as the capture package does, and
// returns the capture directory.
func writeCapture(t *testing.T, root string, c *Capture) string {
	t.Helper()
	r, err := capdir.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	files, err := CaptureFiles(c)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := r.Write(&c.Info, files)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCaptureFiles(t *testing.T) {
	c := fixtureCapture(t)
	dir := writeCapture(t, t.TempDir(), c)
	var files []string
	des, _ := os.ReadDir(dir)
	for _, e := range des {
		files = append(files, e.Name())
	}
	want := []string{capdir.FileInfo, capdir.FileProfile, capdir.FileText, capdir.FileHTML, capdir.FileThreadJSON, capdir.FileThreads}
	sort.Strings(want)
	if !reflect.DeepEqual(files, want) {
		t.Errorf("files %v, want %v", files, want)
	}

	var info map[string]any
	data, err := os.ReadFile(filepath.Join(dir, capdir.FileInfo))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	counts, _ := info["counts"].(map[string]any)
	if counts["samples"] != 101.0 || counts["lost_records"] != 3.0 || counts["jit_sources"] != 1.0 {
		t.Errorf("capture.json counts %v", counts)
	}
	// The findings in capture.json are the report's, as data: the
	// fixture's deadlock of tids 12 and 13 first.
	findings, _ := info["findings"].([]any)
	if len(findings) == 0 {
		t.Fatalf("capture.json has no findings: %s", data)
	}
	first, _ := findings[0].(map[string]any)
	if first["kind"] != "deadlock" || first["severity"] != "critical" || !reflect.DeepEqual(first["tids"], []any{12.0, 13.0}) ||
		!strings.HasPrefix(first["summary"].(string), "DEADLOCK: tid 12") {
		t.Errorf("first finding %v", first)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, capdir.FileText))
	for _, f := range c.Info.Findings {
		if !strings.Contains(string(txt), "  * "+f.Summary+"\n") {
			t.Errorf("report.txt does not list the finding %q:\n%s", f.Summary, txt)
		}
	}

	back, err := ReadCapture(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Threads, c.Threads) {
		t.Error("the snapshot read back from threads.json differs")
	}
	if len(back.Profile.Sample) != len(c.Profile.Sample) || back.Info.Counts != c.Info.Counts || back.Info.Reason != c.Info.Reason {
		t.Error("profile or info read back differ")
	}
}

func TestCaptureFilesMinimal(t *testing.T) {
	// A capture cut short before any sample: still a valid, smaller
	// directory that says why.
	info := model.Info{Trigger: model.Signal, PID: 77, TriggerAt: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), CutShort: true, CutShortWhy: "SIGTERM before the first sample"}
	dir := writeCapture(t, t.TempDir(), &Capture{Info: info})
	if filepath.Base(dir) != "20260201T000000.000Z-77-signal" {
		t.Errorf("dir %s", dir)
	}
	p, err := ReadProfile(context.Background(), filepath.Join(dir, capdir.FileProfile))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 0 || len(p.SampleType) != 4 || !containsString(p.Comments, "cut short: SIGTERM before the first sample") {
		t.Errorf("empty profile: %d samples, %d types, comments %q", len(p.Sample), len(p.SampleType), p.Comments)
	}
	if _, err := os.Stat(filepath.Join(dir, capdir.FileThreads)); !os.IsNotExist(err) {
		t.Errorf("threads.pb.gz written without a snapshot: %v", err)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, capdir.FileText))
	if !strings.Contains(string(txt), "CUT SHORT   SIGTERM before the first sample") {
		t.Errorf("report.txt does not say why it is short:\n%s", txt)
	}
}

func TestCaptureFilesBrokenSnapshot(t *testing.T) {
	c := fixtureCapture(t)
	c.Threads.Threads[0].Kernel = []*model.Location{nil} // a broken snapshot: BuildThreads fails
	if _, err := CaptureFiles(c); err == nil || !strings.Contains(err.Error(), "frame 0 is nil") {
		t.Fatalf("err %v, want the broken frame named", err)
	}
}

// TestReportFilesAfterUpdate: a recovery recorded in capture.json shows in
// the reports rendered again from the capture's own files.
func TestReportFilesAfterUpdate(t *testing.T) {
	root := t.TempDir()
	dir := writeCapture(t, root, fixtureCapture(t))
	r, err := capdir.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recovered := time.Date(2026, 1, 5, 14, 30, 44, 145e6, time.UTC)
	err = r.Update(filepath.Base(dir), func(in *model.Info) {
		in.Recovered = recovered
		in.StallLen = recovered.Sub(in.LastBeat)
	}, func(d *capdir.Dir) ([]capdir.File, error) {
		c, err := Load(context.Background(), d)
		if err != nil {
			return nil, err
		}
		return ReportFiles(c), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, capdir.FileText))
	if !strings.Contains(string(txt), "recovered: the stall lasted 42s (beats resumed at 2026-01-05 14:30:44.145 UTC)") {
		t.Errorf("report.txt not updated:\n%s", txt)
	}
	html, _ := os.ReadFile(filepath.Join(dir, capdir.FileHTML))
	if !strings.Contains(string(html), "the stall lasted 42s") {
		t.Error("report.html not updated")
	}
}

func TestReadCaptureFromThreadsPB(t *testing.T) {
	// Without threads.json, the thread table comes from threads.pb.gz,
	// and whose threads they are from capture.json.
	dir := writeCapture(t, t.TempDir(), fixtureCapture(t))
	if err := os.Remove(filepath.Join(dir, capdir.FileThreadJSON)); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCapture(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Threads == nil || len(c.Threads.Threads) != 8 || len(c.Threads.Locks.Cycles) != 1 {
		t.Fatalf("threads from threads.pb.gz: %+v", c.Threads)
	}
	if c.Threads.PID != 4242 || !reflect.DeepEqual(c.Threads.Command, []string{"/usr/bin/app", "--serve"}) {
		t.Errorf("snapshot of pid %d %q, want capture.json's", c.Threads.PID, c.Threads.Command)
	}
	// Alone, threads.pb.gz names its pid in a label, not a comment.
	p, err := ReadProfile(context.Background(), filepath.Join(dir, capdir.FileThreads))
	if err != nil {
		t.Fatal(err)
	}
	p.Comments = nil
	snap, err := ThreadsFromProfile(p)
	if err != nil || snap.PID != 4242 {
		t.Errorf("ThreadsFromProfile without comments: pid %d, %v", snap.PID, err)
	}
}

// TestReadCaptureWithoutProfile: a capture whose profile could not be
// written still renders from its snapshot and facts.
func TestReadCaptureWithoutProfile(t *testing.T) {
	dir := writeCapture(t, t.TempDir(), fixtureCapture(t))
	if err := os.Remove(filepath.Join(dir, capdir.FileProfile)); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCapture(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Profile != nil || c.Threads == nil {
		t.Fatalf("profile %v, threads %v", c.Profile != nil, c.Threads != nil)
	}
	var sb strings.Builder
	if err := WriteText(&sb, c); err != nil || !strings.Contains(sb.String(), "DEADLOCK") {
		t.Errorf("report without a profile: %v\n%s", err, sb.String())
	}
}

// TestCaptureFilesRendersTheFindingsGiven: the reports say the findings
// capture.json holds and draw none of their own; laying them out changes
// nothing of the capture's facts.
func TestCaptureFilesRendersTheFindingsGiven(t *testing.T) {
	c := fixtureCapture(t)
	given := model.Finding{Kind: "made_up", Severity: model.SeverityWarning, Summary: "A finding no detector draws."}
	c.Info.Findings = []model.Finding{given}
	if _, err := CaptureFiles(c); err != nil {
		t.Fatal(err)
	}
	if len(c.Info.Findings) != 1 || c.Info.Findings[0].Summary != given.Summary {
		t.Fatalf("CaptureFiles changed the findings: %+v", c.Info.Findings)
	}
	c.Info.Findings = nil
	dir := writeCapture(t, t.TempDir(), c)
	txt, err := os.ReadFile(filepath.Join(dir, capdir.FileText))
	if err != nil {
		t.Fatal(err)
	}
	if c.Info.Findings != nil || strings.Contains(string(txt), "Findings (the most likely cause first)") {
		t.Errorf("a capture without findings was given some by its layout:\n%s", txt)
	}
	c.Info.Findings = []model.Finding{given}
	dir = writeCapture(t, t.TempDir(), c)
	txt, _ = os.ReadFile(filepath.Join(dir, capdir.FileText))
	if !strings.Contains(string(txt), "  * "+given.Summary+"\n") {
		t.Errorf("report.txt does not say the finding given:\n%s", txt)
	}
}
