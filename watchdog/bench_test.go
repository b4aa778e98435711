package watchdog

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkDetectionLatency induces stalls of a real heartbeat file
// (replaced atomically every 10 ms by a writer, then left alone) and
// measures how late each stall is reported: trigger − (last beat +
// stall-after), the last beat being stamped just before its rename. The
// issue asks for p99 ≤ 250 ms over 50 stalls. STALLWATCH_BENCH_STALLS
// changes the number of stalls per run.
func BenchmarkDetectionLatency(b *testing.B) {
	stalls := 50
	if n, err := strconv.Atoi(os.Getenv("STALLWATCH_BENCH_STALLS")); err == nil && n > 0 {
		stalls = n
	}
	const stallAfter = 200 * time.Millisecond
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, detectionLatencies(b, stalls, stallAfter)...)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / 1e6
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(0.99)/250, "p99-of-budget")
	b.ReportMetric(0, "ns/op")
}

func detectionLatencies(b *testing.B, stalls int, stallAfter time.Duration) []time.Duration {
	dir := b.TempDir()
	path := filepath.Join(dir, "beat")
	fc := newFakeCapturer(10 * time.Millisecond)
	w, err := New(Config{
		Sources: []Source{&File{Path: path, Poll: PollInterval(stallAfter)}}, StallAfter: stallAfter,
		RecaptureAfter: time.Hour, MaxCaptures: 1 << 20, Capturer: fc, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var lat []time.Duration
	for i := 0; i < stalls; i++ {
		beater := &fileBeater{path: path, stop: make(chan struct{}), done: make(chan struct{})}
		beater.run(10 * time.Millisecond)
		time.Sleep(stallAfter / 2) // healthy for a while
		if i > 0 {
			select {
			case <-fc.recovered:
			case <-time.After(5 * time.Second):
				b.Fatal("stall did not recover")
			}
		}
		beater.halt()
		select {
		case tr := <-fc.captures:
			lat = append(lat, time.Duration(tr.Mono)-time.Duration(beater.lastBeat.Load())-stallAfter)
		case <-time.After(stallAfter + 5*time.Second):
			b.Fatal("stall not detected")
		}
	}
	return lat
}
