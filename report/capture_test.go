package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/symbolize"
)

func TestWriteCapture(t *testing.T) {
	root := t.TempDir()
	c := fixtureCapture(t)
	dir, err := WriteCapture(root, c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.Base(dir), "20260105T143012.345Z-4242-stall"; got != want {
		t.Errorf("directory %s, want %s", got, want)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("root holds %d entries, want only the capture: %v", len(entries), entries)
	}
	var files []string
	des, _ := os.ReadDir(dir)
	for _, e := range des {
		files = append(files, e.Name())
	}
	want := []string{FileInfo, FileProfile, FileText, FileHTML, FileThreadJSON, FileThreads}
	sort.Strings(want)
	if !reflect.DeepEqual(files, want) {
		t.Errorf("files %v, want %v (and no temporaries)", files, want)
	}

	var info map[string]any
	data, err := os.ReadFile(filepath.Join(dir, FileInfo))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{
		"schema": 1.0, "trigger": "stall", "pid": 4242.0, "kernel": "6.1.0-test", "stall_ns": 10.2e9,
		"trigger_at": "2026-01-05T14:30:12.345Z", "cut_short": false, "target_exited": false, "stallwatch_version": "test",
	} {
		if info[k] != v {
			t.Errorf("capture.json %s = %v, want %v", k, info[k], v)
		}
	}
	counts, _ := info["counts"].(map[string]any)
	if counts["samples"] != 101.0 || counts["lost_records"] != 3.0 || counts["jit_sources"] != 1.0 {
		t.Errorf("capture.json counts %v", counts)
	}

	back, err := ReadCapture(dir)
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

func TestWriteCaptureMinimal(t *testing.T) {
	// A capture cut short before any sample: still a valid, smaller
	// directory that says why.
	root := t.TempDir()
	info := Info{Trigger: "signal", PID: 77, TriggerAt: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), CutShort: true, CutShortWhy: "SIGTERM before the first sample"}
	dir, err := WriteCapture(root, &Capture{Info: info})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(dir) != "20260201T000000.000Z-77-signal" {
		t.Errorf("dir %s", dir)
	}
	p, err := ReadProfile(filepath.Join(dir, FileProfile))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 0 || len(p.SampleType) != 4 || !containsString(p.Comments, "cut short: SIGTERM before the first sample") {
		t.Errorf("empty profile: %d samples, %d types, comments %q", len(p.Sample), len(p.SampleType), p.Comments)
	}
	if _, err := os.Stat(filepath.Join(dir, FileThreads)); !os.IsNotExist(err) {
		t.Errorf("threads.pb.gz written without a snapshot: %v", err)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, FileText))
	if !strings.Contains(string(txt), "CUT SHORT   SIGTERM before the first sample") {
		t.Errorf("report.txt does not say why it is short:\n%s", txt)
	}
}

func TestWriteCaptureSameMillisecond(t *testing.T) {
	root := t.TempDir()
	c := fixtureCapture(t)
	d1, err := WriteCapture(root, c)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := WriteCapture(root, c)
	if err != nil {
		t.Fatal(err)
	}
	if d1 == d2 || filepath.Base(d2) != filepath.Base(d1)+"-2" || !IsCaptureDir(filepath.Base(d2)) {
		t.Errorf("second capture of the same millisecond: %s after %s", d2, d1)
	}
	if _, err := os.Stat(filepath.Join(d1, FileProfile)); err != nil {
		t.Errorf("the first capture was damaged: %v", err)
	}
}

// TestWriteCaptureAtomic watches the root while captures are written: a
// capture directory that is visible at all is complete.
func TestWriteCaptureAtomic(t *testing.T) {
	root := t.TempDir()
	c := fixtureCapture(t)
	var stop atomic.Bool
	var seen atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			entries, _ := os.ReadDir(root)
			for _, e := range entries {
				if !IsCaptureDir(e.Name()) {
					continue
				}
				seen.Add(1)
				for _, f := range []string{FileInfo, FileProfile, FileThreads, FileThreadJSON, FileText, FileHTML} {
					if st, err := os.Stat(filepath.Join(root, e.Name(), f)); err != nil || st.Size() == 0 {
						t.Errorf("visible capture %s lacks %s: %v", e.Name(), f, err)
						return
					}
				}
				if _, err := readInfo(filepath.Join(root, e.Name(), FileInfo)); err != nil {
					t.Errorf("visible capture %s: %v", e.Name(), err)
					return
				}
			}
		}
	}()
	for i := 0; i < 20; i++ {
		c.Info.TriggerAt = c.Info.TriggerAt.Add(time.Second)
		if _, err := WriteCapture(root, c); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if seen.Load() == 0 {
		t.Error("the watcher never saw a capture")
	}
}

func TestWriteCaptureFailureLeavesNothing(t *testing.T) {
	root := t.TempDir()
	c := fixtureCapture(t)
	c.Threads.Threads[0].Kernel = []*symbolize.Location{nil} // a broken snapshot: BuildThreads fails
	if _, err := WriteCapture(root, c); err == nil || !strings.Contains(err.Error(), "frame 0 is nil") {
		t.Fatalf("err %v, want the broken frame named", err)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 0 {
		t.Errorf("a failed capture left %v behind", entries)
	}
}

func TestUpdateInfo(t *testing.T) {
	dir, err := WriteCapture(t.TempDir(), fixtureCapture(t))
	if err != nil {
		t.Fatal(err)
	}
	recovered := time.Date(2026, 1, 5, 14, 30, 44, 145e6, time.UTC)
	err = UpdateInfo(dir, func(in *Info) {
		in.Recovered = recovered
		in.StallLen = recovered.Sub(in.LastBeat)
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := readInfo(filepath.Join(dir, FileInfo))
	if err != nil {
		t.Fatal(err)
	}
	if !info.Recovered.Equal(recovered) || info.StallLen != 42*time.Second || info.Reason != "no heartbeat for 10.2s" {
		t.Errorf("capture.json after update: recovered %v, stall %v, reason %q", info.Recovered, info.StallLen, info.Reason)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, FileText))
	if !strings.Contains(string(txt), "recovered: the stall lasted 42s (beats resumed at 2026-01-05 14:30:44.145 UTC)") {
		t.Errorf("report.txt not updated:\n%s", txt)
	}
	html, _ := os.ReadFile(filepath.Join(dir, FileHTML))
	if !strings.Contains(string(html), "the stall lasted 42s") {
		t.Error("report.html not updated")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if err := UpdateInfo(filepath.Join(dir, "nope"), func(*Info) {}); err == nil {
		t.Error("updating a missing capture succeeded")
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	c := &Capture{Info: Info{Trigger: "stall", PID: 9}}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Written out of time order: Prune goes by the time in the name.
	for _, min := range []int{3, 1, 4, 0, 2} {
		c.Info.TriggerAt = base.Add(time.Duration(min) * time.Minute)
		if _, err := WriteCapture(root, c); err != nil {
			t.Fatal(err)
		}
	}
	mustMkdir := func(name string, age time.Duration) {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	mustMkdir("keep-me", 48*time.Hour)
	mustMkdir(tempPrefix+"stale", 2*time.Hour)
	mustMkdir(tempPrefix+"writing", time.Second)
	if err := os.WriteFile(filepath.Join(root, "20200101T000000.000Z-1-stall.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := Prune(root, 2); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{tempPrefix + "writing", "20200101T000000.000Z-1-stall.txt", "20260301T120300.000Z-9-stall", "20260301T120400.000Z-9-stall", "keep-me"}
	if !reflect.DeepEqual(left, want) {
		t.Errorf("after Prune(2): %v, want %v", left, want)
	}
	if err := Prune(root, 0); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != len(want) {
		t.Errorf("Prune(0) removed something: %v", entries)
	}
	if err := Prune(filepath.Join(root, "missing"), 1); err != nil {
		t.Errorf("pruning a root that does not exist yet: %v", err)
	}
}

func TestCaptureDirName(t *testing.T) {
	at := time.Date(2026, 1, 5, 14, 30, 12, 345678901, time.FixedZone("CET", 3600))
	tests := []struct {
		info Info
		seq  int
		want string
	}{
		{Info{TriggerAt: at, PID: 12, Trigger: "stall"}, 1, "20260105T133012.345Z-12-stall"},
		{Info{TriggerAt: at, PID: 12, Trigger: "signal"}, 3, "20260105T133012.345Z-12-signal-3"},
		{Info{Start: at, PID: 12}, 1, "20260105T133012.345Z-12-manual"},
		{Info{TriggerAt: at, PID: 12, Trigger: "../../etc"}, 1, "20260105T133012.345Z-12-etc"},
	}
	for _, tt := range tests {
		got := CaptureDirName(&tt.info, tt.seq)
		if got != tt.want || !IsCaptureDir(got) {
			t.Errorf("CaptureDirName(%+v, %d) = %s, want %s", tt.info, tt.seq, got, tt.want)
		}
	}
}

func TestReadCaptureFromThreadsPB(t *testing.T) {
	// Without threads.json, the thread table comes from threads.pb.gz.
	dir, err := WriteCapture(t.TempDir(), fixtureCapture(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, FileThreadJSON)); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCapture(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Threads == nil || len(c.Threads.Threads) != 8 || len(c.Threads.Locks.Cycles) != 1 {
		t.Fatalf("threads from threads.pb.gz: %+v", c.Threads)
	}
}
