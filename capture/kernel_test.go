package capture

import (
	"context"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/kernelctx"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// TestKernelContextOfCapture: a capture's capture.json has the target's
// kernel context over its window, with its threads' counters, and over
// the flight recorder's history before the trigger from the periodic
// readings; closing the session stops them.
func TestKernelContextOfCapture(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, testutil.BuildGo(t, "spin"), "-threads", "2")
	tg.WaitLine(t, "ready", 10*time.Second)
	const history = 4 * time.Second
	s, err := Open(Config{PID: tg.Pid, Out: t.TempDir(), Freq: 499, BaselineFreq: 97, CaptureFor: time.Second, History: history, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := testutil.Eventually(30*time.Second, func() bool {
		s.kw.mu.Lock()
		defer s.kw.mu.Unlock()
		return len(s.kw.past) >= 2
	}); err != nil {
		t.Fatalf("no periodic readings of the kernel context (every %v)", kernelEvery(history))
	}
	res, err := s.Capture(context.Background(), model.Trigger{Kind: model.Stall, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	k, before := res.Info.KernelContext, res.Info.KernelBefore
	if k == nil || before == nil {
		t.Fatalf("kernel context %v, before the trigger %v: want both", k, before)
	}
	if k.Duration < 900*time.Millisecond || len(k.Cgroups) == 0 || k.Host.Ticks == 0 || len(k.Threads) == 0 {
		t.Errorf("the capture's window: %v long, cgroups %v, host %+v, %d threads' counters", k.Duration, k.Cgroups, k.Host, len(k.Threads))
	}
	if before.Duration <= 0 || before.Duration > history+kernelEvery(history) || len(before.Threads) != 0 || !before.End.Equal(k.Start) {
		t.Errorf("the history's window: %v long (history %v), %d threads, ends %v (the capture's starts %v)", before.Duration, history, len(before.Threads), before.End, k.Start)
	}
	s.Close()
	select {
	case <-s.kw.done:
	default:
		t.Errorf("the periodic readings go on after Close")
	}
}

func TestKernelWatchSince(t *testing.T) {
	k := &kernelWatch{}
	for _, mono := range []uint64{10, 20, 30} {
		k.keep(&kernelctx.Reading{Mono: mono})
	}
	for _, tt := range []struct{ at, want uint64 }{{25, 20}, {30, 30}, {5, 10}, {99, 30}} {
		if got := k.since(tt.at); got.Mono != tt.want {
			t.Errorf("since(%d) = %d, want %d", tt.at, got.Mono, tt.want)
		}
	}
	for i := 0; i < 2*kernelKept; i++ {
		k.keep(&kernelctx.Reading{Mono: uint64(100 + i)})
	}
	if len(k.past) != kernelKept || k.past[0].Mono != uint64(100+kernelKept) {
		t.Errorf("%d readings kept, oldest %d", len(k.past), k.past[0].Mono)
	}
	if (&kernelWatch{}).since(5) != nil {
		t.Errorf("a reading from none")
	}
	for _, tt := range []struct{ history, every time.Duration }{{time.Second, time.Second}, {30 * time.Second, 7500 * time.Millisecond}, {10 * time.Minute, 30 * time.Second}} {
		if got := kernelEvery(tt.history); got != tt.every {
			t.Errorf("kernelEvery(%v) = %v, want %v", tt.history, got, tt.every)
		}
	}
}

// BenchmarkKernelContextCost: what reading the kernel context costs a
// capture of a 1,000-thread process (two of them spinning): one reading
// with every thread's counters (kernel-read-ms, the start's and the
// end's each) beside the capture's end (end-ms: the capture's wall time
// past its sampling, which the end reading runs beside) and the
// snapshot (snapshot-ms, which the start reading runs beside), and the
// shares.
//
//	go test -run '^$' -bench KernelContextCost -benchtime 3x ./capture
func BenchmarkKernelContextCost(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequirePtrace(b)
	tg := testutil.Start(b, testutil.BuildC(b, "manythreads/manythreads.c"), "1000", "2")
	tg.WaitLine(b, "ready", 60*time.Second)
	const sampling = 500 * time.Millisecond
	s, err := Open(Config{PID: tg.Pid, Out: b.TempDir(), Freq: 199, CaptureFor: sampling, Snapshot: true, Keep: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := kernelctx.NewReader(tg.Pid)
	var end, snap, read time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := s.Capture(context.Background(), model.Trigger{Kind: model.Manual, Reason: "benchmark"})
		if err != nil {
			b.Fatal(err)
		}
		end += time.Since(start) - sampling
		if res.Info.KernelContext == nil || len(res.Info.KernelContext.Threads) == 0 {
			b.Fatalf("no kernel context in the capture")
		}
		c, err := report.ReadCapture(context.Background(), res.Dir)
		if err != nil {
			b.Fatal(err)
		}
		snap += c.Threads.Duration
		b.StopTimer()
		t0 := time.Now()
		if _, err := r.Read(true); err != nil {
			b.Fatal(err)
		}
		read += time.Since(t0)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(end.Milliseconds())/n, "end-ms")
	b.ReportMetric(float64(snap.Milliseconds())/n, "snapshot-ms")
	b.ReportMetric(float64(read.Milliseconds())/n, "kernel-read-ms")
	b.ReportMetric(read.Seconds()/end.Seconds(), "read/end")
	b.ReportMetric(read.Seconds()/snap.Seconds(), "read/snapshot")
}
