package spool

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkOpen1000 is the cost at start-up of a queue that holds 1,000
// uploads (an agent down for days): Open reads, checks and orders every
// entry. Beside it, the floor: listing the directory and reading each
// file with nothing else (x-floor = ours / floor).
func BenchmarkOpen1000(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "q")
	nop := func(context.Context, Item) error { return nil }
	s, err := Open(Config{Dir: dir, Deliver: nop, MaxBytes: 1 << 40, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	data, _ := json.Marshal(map[string]any{"tags": []string{"service:bank", "env:prod", "version:1.2.3"}})
	for i := 0; i < 1000; i++ {
		if err := s.Add(Item{Key: fmt.Sprintf("/var/lib/stallwatch/20260105T1430%02d.%03dZ-4242-stall", i/1000, i%1000), Size: 5 << 20, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	var ours, floor []time.Duration
	for b.Loop() {
		start := time.Now()
		s, err := Open(Config{Dir: dir, Deliver: nop, MaxBytes: 1 << 40, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if st := s.Stats(); st.Queued != 1000 {
			b.Fatalf("%d queued", st.Queued)
		}
		s.Close()
		ours = append(ours, time.Since(start))

		start = time.Now()
		ents, err := os.ReadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range ents {
			if _, err := os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
				b.Fatal(err)
			}
		}
		floor = append(floor, time.Since(start))
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	mo, mf := med(ours), med(floor)
	b.ReportMetric(float64(mo)/1e6, "ms/open")
	b.ReportMetric(float64(mf)/1e6, "floor-ms")
	b.ReportMetric(float64(mo)/float64(mf), "x-floor")
	b.ReportMetric(0, "ns/op")
}
