package analysis

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// TestFindingsOfACaptureReadBack: the findings drawn from a capture
// directory read back are those it was written with: they are drawn from
// what the directory keeps (the profile as profile.pb.gz has it, the
// snapshot as threads.json has it, capture.json's facts).
func TestFindingsOfACaptureReadBack(t *testing.T) {
	d := func(th model.Thread) model.Thread {
		th.Kernel, th.OffCPUFor, th.OffCPUKnown = vforkKernel, 15*time.Second, true
		return th
	}
	threads := []model.Thread{
		waitsFor(thread(101, "a", 'S', lockStack[1:]...), 102), waitsFor(thread(102, "b", 'S', lockStack[1:]...), 101),
		thread(103, "spin", 'R', spinStack...), d(thread(104, "disk", 'D')),
		thread(105, "js", 'S', stack(at(mJIT, "handler"), at(mAnon, "[anon] 0x7f0000"))...),
	}
	samples := []model.Sample{
		on(103, 9*time.Second, spinStack), off(101, 9*time.Second, false, lockStack), off(102, 9*time.Second, false, lockStack),
		on(105, time.Second, stack(at(mJIT, "handler"), at(mAnon, "[anon] 0x7f0000"))), off(105, 2*time.Second, true, idleStack),
	}
	for i := range samples {
		samples[i].EndNanos = trigger.Add(time.Duration(i+1) * time.Second).UnixNano()
	}
	info := capdir.NewInfo(model.Target{PID: 100, Command: []string{"/usr/bin/app"}, Executable: "/usr/bin/app"},
		model.Trigger{Kind: model.Stall, At: trigger, Reason: "test"})
	info.Start, info.End = trigger.Add(-window), trigger.Add(window)
	snap := &model.Snapshot{PID: 100, Command: []string{"/usr/bin/app"}, Time: trigger, Threads: threads, Locks: model.BuildLockGraph(threads)}
	prof, err := report.BuildProfile(samples, model.Meta{Start: info.Start, Duration: 2 * window, Period: int64(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	c := &report.Capture{Info: info, Profile: prof, Threads: snap}
	c.Info.Findings = Findings(&c.Info, report.Samples(prof), snap)
	if len(c.Info.Findings) < 3 {
		t.Fatalf("the scene should give several findings: %s", kinds(c.Info.Findings))
	}
	root, err := capdir.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	files, err := report.CaptureFiles(c)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := root.Write(&c.Info, files)
	if err != nil {
		t.Fatal(err)
	}
	back, err := report.ReadCapture(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Info.Findings, c.Info.Findings) {
		t.Fatalf("capture.json holds %s, the capture drew %s", kinds(back.Info.Findings), kinds(c.Info.Findings))
	}
	again := Findings(&back.Info, report.Samples(back.Profile), back.Threads)
	if !reflect.DeepEqual(again, c.Info.Findings) {
		t.Errorf("drawn again from the directory:\n%+v\nwritten with:\n%+v", again, c.Info.Findings)
	}
}
