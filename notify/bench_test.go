package notify

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/dsdtest"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/notify/alert"
	"github.com/stallwatch/stallwatch/watchdog"
)

// BenchmarkTriggerToAlert measures, over real stalls of a heartbeat file,
// the time from the watchdog's trigger to the stall's event datagram
// arriving at a real DogStatsD UDP socket, while the capture itself takes
// a second: alerts must not wait for it. The goal is under 50 ms;
// p99-of-budget is p99 / 50 ms.
func BenchmarkTriggerToAlert(b *testing.B) {
	const stalls = 10
	const stallAfter = 300 * time.Millisecond
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, triggerToAlert(b, stalls, stallAfter)...)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / 1e6 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(0.99)/50, "p99-of-budget")
	b.ReportMetric(0, "ns/op")
}

func triggerToAlert(b *testing.B, stalls int, stallAfter time.Duration) []time.Duration {
	tmp := b.TempDir()
	beat := filepath.Join(tmp, "beat")
	dsd := dsdtest.ListenUDP(b)
	ac, err := alert.New(alert.Config{Addr: dsd.Addr, Hostname: "h"})
	if err != nil {
		b.Fatal(err)
	}
	defer ac.Close()
	n := New(Config{Alerts: ac, Logger: slog.New(slog.DiscardHandler)})
	defer n.Close()
	var mu sync.Mutex
	var triggers []time.Time
	h := n.For(Target{PID: 1, Process: "bench"})
	var logs testutil.Buffer
	wd, err := watchdog.New(watchdog.Config{
		Sources:    []watchdog.Source{&watchdog.File{Path: beat, Poll: watchdog.PollInterval(stallAfter)}},
		StallAfter: stallAfter, RecaptureAfter: time.Hour, MaxCaptures: 1 << 20,
		Capturer: &diskCapturer{t: b, root: filepath.Join(tmp, "out"), hold: time.Second},
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)), ReportEvery: time.Hour,
		Events: func(ev watchdog.Event) {
			if ev.Kind == watchdog.StallBegan {
				mu.Lock()
				triggers = append(triggers, ev.At)
				mu.Unlock()
			}
			h(ev)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { wd.Run(ctx); close(runDone) }()
	defer func() { cancel(); <-runDone }() // a capture in flight writes into tmp
	var lat []time.Duration
	for i := 0; i < stalls; i++ {
		healthy := strings.Count(logs.String(), "heartbeat healthy")
		stop := beater(b, beat)
		if err := testutil.Eventually(10*time.Second, func() bool { return strings.Count(logs.String(), "heartbeat healthy") > healthy }); err != nil {
			b.Fatal("the watchdog saw no beat")
		}
		stop()
		for {
			d := <-dsd.C
			msgs, err := dsdtest.Parse(d.Data)
			if err != nil {
				b.Fatal(err)
			}
			if slices.ContainsFunc(msgs, func(m dsdtest.Message) bool {
				return m.Event != nil && m.Event.AlertType == "error" && strings.Contains(m.Event.Title, "stalled: no heartbeat")
			}) {
				mu.Lock()
				lat = append(lat, d.At.Sub(triggers[len(triggers)-1]))
				mu.Unlock()
				break
			}
		}
	}
	return lat
}
