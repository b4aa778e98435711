package report

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
)

// benchSamples makes n samples shaped like a busy capture: 64 threads,
// 4,000 distinct stacks 10 to 60 frames deep (kernel frames on top of a
// third of them, inlined lines in some) drawn from 6,000 locations, hot
// stacks far more often than cold ones, a fifth of them off-CPU.
func benchSamples(n int) []model.Sample {
	r := rand.New(rand.NewPCG(1, 2))
	exe := &model.Mapping{Start: 0x400000, Limit: 0x2000000, File: "/usr/bin/server", BuildID: "0123456789abcdef", Kind: model.KindNative}
	libc := &model.Mapping{Start: 0x7f0000000000, Limit: 0x7f0000200000, File: "/usr/lib/x86_64-linux-gnu/libc.so.6", Kind: model.KindNative}
	kern := &model.Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff83000000, File: model.KernelMapping, Kind: model.KindKernel}
	var user, kernel []*model.Location
	for i := 0; i < 5500; i++ {
		m := exe
		if i%10 == 0 {
			m = libc
		}
		l := &model.Location{Addr: m.Start + uint64(i)*64, Mapping: m, Kind: model.KindNative,
			Lines: []model.Line{{Function: fmt.Sprintf("pkg%d.Function%d", i%50, i), File: fmt.Sprintf("/src/pkg%d/file%d.go", i%50, i%300), Line: int64(i%900 + 1)}}}
		if i%7 == 0 {
			l.Lines = append([]model.Line{{Function: fmt.Sprintf("pkg%d.inlined%d", i%50, i), File: "/src/inl.go", Line: 10}}, l.Lines...)
		}
		user = append(user, l)
	}
	for i := 0; i < 500; i++ {
		kernel = append(kernel, &model.Location{Addr: kern.Start + uint64(i)*256, Mapping: kern, Kind: model.KindKernel,
			Lines: []model.Line{{Function: fmt.Sprintf("kernel_fn_%d", i)}}})
	}
	stacks := make([][]*model.Location, 4000)
	for i := range stacks {
		var s []*model.Location
		if i%3 == 0 {
			for k := 0; k < 3+r.IntN(8); k++ {
				s = append(s, kernel[r.IntN(len(kernel))])
			}
		}
		for k := 0; k < 10+r.IntN(50); k++ {
			s = append(s, user[r.IntN(len(user))])
		}
		stacks[i] = s
	}
	samples := make([]model.Sample, n)
	// 10 s of samples, 100 µs apart, ending now: the first 30% before
	// the trigger
	end0 := time.Now().Add(-10 * time.Second).UnixNano()
	for i := range samples {
		st := int(float64(len(stacks)) * r.Float64() * r.Float64() * r.Float64()) // hot stacks first
		tid := 1000 + r.IntN(64)
		s := model.Sample{Stack: stacks[st], TID: tid, ThreadName: fmt.Sprintf("worker-%d", tid%16), Phase: model.PhaseDuring, Count: 1,
			PID: 1000, EndNanos: end0 + int64(i)*int64(10*time.Second)/int64(n)}
		if i < n*3/10 {
			s.Phase = model.PhaseBefore
		}
		if i%5 == 0 {
			s.OffCPU, s.Count, s.Nanos = true, 0, int64(r.IntN(1e8))
		}
		samples[i] = s
	}
	return samples
}

// BenchmarkBuildProfile measures what happens between the end of sampling
// and a written profile.pb.gz, after symbolization: 100,000 samples into a
// pprof profile, gzipped. Goal (issue 3): well under a second with
// symbolization included.
func BenchmarkBuildProfile(b *testing.B) {
	samples := benchSamples(100_000)
	meta := model.Meta{Start: time.Now(), Duration: 40 * time.Second, Period: int64(time.Second) / 997}
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		p, err := BuildProfile(samples, meta)
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if err := WriteProfile(&buf, p); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(size)/1e6, "MB-gz")
	// CPU time is the figure to read on a shared machine: wall time
	// includes waiting for a core.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchCapture is a 100,000-sample capture of 10 s (3 s of flight
// recorder) with a 64-thread snapshot.
func benchCapture(b *testing.B) *Capture {
	samples := benchSamples(100_000)
	start := time.Unix(0, samples[0].EndNanos)
	end := time.Unix(0, samples[len(samples)-1].EndNanos)
	p, err := BuildProfile(samples, model.Meta{Start: start, Duration: end.Sub(start), Period: int64(time.Second) / 997})
	if err != nil {
		b.Fatal(err)
	}
	info := model.Info{Trigger: model.Stall, PID: 1000, Start: start, TriggerAt: start.Add(3 * time.Second), End: end}
	return &Capture{Info: info, Profile: p, Threads: benchSnapshot(samples)}
}

// BenchmarkWriteText measures report.txt for the same capture.
func BenchmarkWriteText(b *testing.B) {
	c := benchCapture(b)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := WriteText(io.Discard, c); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkWriteHTML measures report.html (its data and viewer included)
// and states its size; the page's load time in a browser is
// BenchmarkPageLoad's.
func BenchmarkWriteHTML(b *testing.B) {
	c := benchCapture(b)
	var size int
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, c); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(size)/1e6, "MB")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkWriteCapture measures a whole capture directory for 100,000
// samples and a 64-thread snapshot: both profiles, threads.json, both
// reports, capture.json, each synced and renamed into place.
func BenchmarkWriteCapture(b *testing.B) {
	samples := benchSamples(100_000)
	p, err := BuildProfile(samples, model.Meta{Period: int64(time.Second) / 997})
	if err != nil {
		b.Fatal(err)
	}
	snap := benchSnapshot(samples)
	root, err := capdir.OpenRoot(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		c := &Capture{Info: model.Info{Trigger: model.Stall, PID: 1, TriggerAt: time.Unix(int64(i), 0)}, Profile: p, Threads: snap}
		files, err := CaptureFiles(c)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := root.Write(&c.Info, files); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}

// benchSnapshot: one thread per tid of samples, each with the stack of
// its first sample.
func benchSnapshot(samples []model.Sample) *model.Snapshot {
	snap := &model.Snapshot{PID: 1}
	seen := map[int]bool{}
	for _, s := range samples {
		if seen[s.TID] {
			continue
		}
		seen[s.TID] = true
		t := model.Thread{TID: s.TID, Name: s.ThreadName, State: 'S', OffCPUKnown: true, OffCPUFor: time.Second}
		for _, l := range s.Stack {
			if l.Kind == model.KindKernel {
				t.Kernel = append(t.Kernel, l)
			} else {
				t.User = append(t.User, l)
			}
		}
		snap.Threads = append(snap.Threads, t)
	}
	return snap
}

// BenchmarkReportBesidePprof is `stallwatch report` on a 100,000-sample
// capture directory (read it, render report.txt), beside `go tool pprof
// -top` on the same profile.pb.gz, the reference a user would otherwise
// run: the ratio is how many times faster (or, below 1, slower) the whole
// report is than pprof's top table alone.
func BenchmarkReportBesidePprof(b *testing.B) {
	c := benchCapture(b)
	root, err := capdir.OpenRoot(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	files, err := CaptureFiles(c)
	if err != nil {
		b.Fatal(err)
	}
	dir, err := root.Write(&c.Info, files)
	if err != nil {
		b.Fatal(err)
	}
	pprofTop := func() time.Duration {
		start := time.Now()
		cmd := exec.Command("go", "tool", "pprof", "-top", "-sample_index=wall-time", filepath.Join(dir, capdir.FileProfile))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go tool pprof: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	var ours, theirs time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rc, err := ReadCapture(context.Background(), dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteText(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		b.StopTimer()
		theirs += pprofTop()
		b.StartTimer()
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "report-ms")
	b.ReportMetric(float64(theirs.Milliseconds())/float64(b.N), "pprof-top-ms")
	b.ReportMetric(theirs.Seconds()/ours.Seconds(), "x-faster-than-pprof-top")
}

// builtBenchCapture is benchCapture's capture made as package capture
// makes one: from its samples (SetSamples), not from a profile.
func builtBenchCapture(b *testing.B) *Capture {
	samples := benchSamples(100_000)
	start := time.Unix(0, samples[0].EndNanos)
	end := time.Unix(0, samples[len(samples)-1].EndNanos)
	info := model.Info{Trigger: model.Stall, PID: 1000, Start: start, TriggerAt: start.Add(3 * time.Second), End: end}
	c := &Capture{Info: info, Threads: benchSnapshot(samples)}
	if err := c.SetSamples(samples, model.Meta{Start: start, Duration: end.Sub(start), Period: int64(time.Second) / 997}); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkWriters measures each file CaptureFiles renders for a capture
// built from 100,000 samples, as a capture's end writes them (the
// renderings' shared view made once, outside the timing).
func BenchmarkWriters(b *testing.B) {
	c := builtBenchCapture(b)
	files, err := CaptureFiles(c)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range files {
		b.Run(f.Name, func(b *testing.B) {
			var size int
			cpu0 := cpuTime()
			for b.Loop() {
				var buf bytes.Buffer
				if err := f.Write(&buf); err != nil {
					b.Fatal(err)
				}
				size = buf.Len()
			}
			b.ReportMetric(float64(size)/1e6, "MB")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
