package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
	reports "github.com/stallwatch/stallwatch/report"
)

// reportCapture writes a small capture: one thread spinning in spin(), one
// blocked in read().
func reportCapture(t *testing.T) string {
	t.Helper()
	exe := &model.Mapping{Start: 0x400000, Limit: 0x500000, File: "/usr/bin/target", Kind: model.KindNative, HasFunctions: true}
	kern := &model.Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff82000000, File: model.KernelMapping, Kind: model.KindKernel}
	loc := func(m *model.Mapping, addr uint64, name string) *model.Location {
		return &model.Location{Addr: addr, Mapping: m, Kind: m.Kind, Lines: []model.Line{{Function: name}}}
	}
	spin := []*model.Location{loc(exe, 0x401000, "spin"), loc(exe, 0x402000, "main")}
	read := []*model.Location{loc(kern, 0xffffffff81001000, "pipe_read"), loc(exe, 0x403000, "reader"), loc(exe, 0x402000, "main")}
	p, err := reports.BuildProfile([]model.Sample{
		{Stack: spin, TID: 10, ThreadName: "spinner", Phase: model.PhaseDuring, Count: 7},
		{Stack: read, TID: 11, ThreadName: "reader", Phase: model.PhaseDuring, OffCPU: true, Nanos: int64(2 * time.Second)},
	}, model.Meta{Period: int64(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	snap := &model.Snapshot{PID: 99, Threads: []model.Thread{
		{TID: 10, Name: "spinner", State: 'R', User: spin},
		{TID: 11, Name: "reader", State: 'S', Kernel: read[:1], User: read[1:], OffCPUKnown: true, OffCPUFor: 2 * time.Second},
	}}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &reports.Capture{
		Info:    model.Info{Trigger: model.Stall, PID: 99, TriggerAt: at, Start: at.Add(-time.Second), End: at.Add(time.Second), Reason: "no heartbeat for 10s"},
		Profile: p, Threads: snap,
	}
	root, err := capdir.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	files, err := reports.CaptureFiles(c)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := root.Write(&c.Info, files)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestReportCommand(t *testing.T) {
	dir := reportCapture(t)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"text of a directory", []string{"report", dir}, []string{"stallwatch STALL capture of pid 99", "no heartbeat for 10s", "Threads (2; waiting first)", "spin ← main"}},
		{"flags after the directory", []string{"report", dir, "--format", "html"}, []string{"<!DOCTYPE html>", `id="sw-data"`, `id="thread-11"`}},
		{"folded wall time", []string{"report", "--format=folded", dir}, []string{"reader-11;main;reader;pipe_read_[k] 2000000000\nspinner-10;main;spin 7000000\n"}},
		{"folded samples", []string{"report", dir, "--format", "folded", "--sample-type", "cpu-samples"}, []string{"spinner-10;main;spin 7\n"}},
		{"speedscope", []string{"report", dir, "--format", "speedscope"}, []string{`"$schema":"https://www.speedscope.app/file-format-schema.json"`, `"name":"tid 11 \"reader\" (wall-time)"`}},
		{"capture.json names its directory", []string{"report", filepath.Join(dir, "capture.json")}, []string{"stallwatch STALL capture of pid 99"}},
		{"a bare profile", []string{"report", filepath.Join(dir, "profile.pb.gz")}, []string{"stallwatch profile", "On-CPU stacks, during the stall"}},
		{"threads.pb.gz renders a thread dump", []string{"report", filepath.Join(dir, "threads.pb.gz")}, []string{"Thread dump of pid", `tid 11      "reader"`, "pipe_read"}},
		{"folded threads", []string{"report", filepath.Join(dir, "threads.pb.gz"), "--format", "folded"}, []string{"reader-99/11;main;reader;pipe_read_[k] 1\nspinner-99/10;main;spin 1\n"}},
		{"threads.json", []string{"report", filepath.Join(dir, "threads.json")}, []string{"stallwatch thread snapshot of pid 99", `tid 10      "spinner"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestReportCommandOutputFile(t *testing.T) {
	dir := reportCapture(t)
	out := filepath.Join(t.TempDir(), "stall.html")
	code, stdout, stderr := runCLI("report", dir, "--format", "html", "-o", out)
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil || !strings.HasPrefix(string(data), "<!DOCTYPE html>") {
		t.Fatalf("%s: %v %.40q", out, err, data)
	}
}

// TestReportCommandOwnInput: -o naming a file the report reads (by any
// name) is refused before anything is written.
func TestReportCommandOwnInput(t *testing.T) {
	dir := reportCapture(t)
	link := filepath.Join(t.TempDir(), "same.pb.gz")
	if err := os.Link(filepath.Join(dir, "profile.pb.gz"), link); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"report", dir, "--format", "folded", "-o", filepath.Join(dir, "profile.pb.gz")},
		{"report", dir, "-o", filepath.Join(dir, "capture.json")},
		{"report", filepath.Join(dir, "threads.json"), "-o", filepath.Join(dir, "threads.json")},
		{"report", link, "--format", "folded", "-o", filepath.Join(dir, "profile.pb.gz")},
	} {
		code, _, stderr := runCLI(args...)
		if code != exitUsage || !strings.Contains(stderr, "is a file the report is read from") {
			t.Errorf("%v: exit %d, %s", args, code, stderr)
		}
	}
	if after, _ := os.ReadFile(link); !bytes.Equal(before, after) {
		t.Error("the input was changed")
	}
	// Its own report.txt is not an input: rendering it again is fine.
	if code, _, stderr := runCLI("report", dir, "-o", filepath.Join(dir, "report.txt")); code != 0 {
		t.Errorf("-o DIR/report.txt: exit %d, %s", code, stderr)
	}
}

// TestReportCommandUnsafeOutput: -o into a directory that other users can
// write is refused with the fix; nothing is written there.
func TestReportCommandUnsafeOutput(t *testing.T) {
	dir := reportCapture(t)
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("report", dir, "-o", filepath.Join(shared, "r.txt"))
	if code != exitFailure || !strings.Contains(stderr, "chmod go-w "+shared) {
		t.Errorf("exit %d, %s", code, stderr)
	}
	if entries, _ := os.ReadDir(shared); len(entries) != 0 {
		t.Errorf("written into the shared directory: %v", entries)
	}
	// Sticky, as /tmp is: others cannot move our files, so it is fine.
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI("report", dir, "-o", filepath.Join(shared, "r.txt")); code != 0 {
		t.Errorf("sticky directory: exit %d, %s", code, stderr)
	}
}

// TestReportCommandFIFO: a named pipe is refused at once; reading it would
// block forever.
func TestReportCommandFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "profile.pb.gz")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var code int
	var stderr string
	go func() {
		code, _, stderr = runCLI("report", fifo)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		// Unblock the reader so that the test can end.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		<-done
		t.Fatal("report blocked on a FIFO")
	}
	if code != exitFailure || !strings.Contains(stderr, "not a regular file (a named pipe)") {
		t.Errorf("exit %d, %s", code, stderr)
	}
}

func TestReportCommandErrors(t *testing.T) {
	dir := reportCapture(t)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no argument", []string{"report"}, exitUsage, "a capture directory or a profile is required"},
		{"two arguments", []string{"report", dir, dir}, exitUsage, "one capture directory or profile, not 2"},
		{"bad format", []string{"report", dir, "--format", "pdf"}, exitUsage, `--format "pdf": want text, html, folded or speedscope`},
		{"sample type without folded", []string{"report", dir, "--sample-type", "cpu-time"}, exitUsage, "--sample-type applies to --format folded and speedscope"},
		{"phase without folded", []string{"report", dir, "--phase", "during"}, exitUsage, "--phase applies to --format folded and speedscope"},
		{"unknown sample type", []string{"report", dir, "--format", "folded", "--sample-type", "nope"}, exitUsage, `stallwatch report: --sample-type: no sample type "nope" in the profile (it has cpu-samples, cpu-time, off-cpu-time, wall-time)` + "\nRun 'stallwatch report --help' for usage.\n"},
		{"unknown phase", []string{"report", dir, "--format", "speedscope", "--phase", "later"}, exitUsage, `--phase: no phase "later" in the profile (it has during)`},
		{"missing path", []string{"report", filepath.Join(dir, "nope")}, exitFailure, "no such file or directory"},
		{"not a profile", []string{"report", filepath.Join(dir, "report.txt")}, exitFailure, "report.txt: not a pprof profile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}

func TestReportHelp(t *testing.T) {
	code, stdout, stderr := runCLI("report", "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("--help exits %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"Usage: stallwatch report DIR|PROFILE", "flamegraph.pl", "go tool pprof", "--sample-type TYPE", "wall-time", "-o, --output FILE"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, stdout)
		}
	}
}
