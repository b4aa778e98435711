package dogstatsd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"

	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/watchdog"
)

// captures stands in for the capture package: it records the triggers a
// watchdog asks it to capture.
type captures struct{ ch chan model.Trigger }

func (c *captures) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	c.ch <- tr
	return &model.Result{Dir: "capture", Trigger: tr}, nil
}

func (c *captures) Recovered(*model.Result, time.Duration) error { return nil }

func (c *captures) expect(t *testing.T, within time.Duration) model.Trigger {
	t.Helper()
	select {
	case tr := <-c.ch:
		return tr
	case <-time.After(within):
		t.Fatalf("no capture within %v", within)
	}
	return model.Trigger{}
}

func (c *captures) expectNone(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case tr := <-c.ch:
		t.Fatalf("unexpected capture: %+v", tr)
	case <-time.After(d):
	}
}

// runWatchdog runs a watchdog of cfg until the test ends.
func runWatchdog(t *testing.T, cfg watchdog.Config) {
	t.Helper()
	w, err := watchdog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { w.Run(ctx); close(finished) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Error("watchdog did not stop")
		}
	})
}

// TestDogStatsDEndToEnd sends metrics with the real Datadog client through
// the proxy to a real UDP agent: every datagram arrives unchanged, and when
// the client stops, the stall fires.
func TestDogStatsDEndToEnd(t *testing.T) {
	ag := startAgent(t, "udp")
	p, err := Listen(Config{Listen: "udp://127.0.0.1:0", Forward: ag.addr, Metric: "app.heartbeat", Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var received [][]byte
	p.tap = func(dg []byte) {
		mu.Lock()
		received = append(received, append([]byte(nil), dg...))
		mu.Unlock()
	}
	fc := &captures{ch: make(chan model.Trigger, 100)}
	stallAfter := time.Second
	runWatchdog(t, watchdog.Config{Sources: []watchdog.Source{p}, StallAfter: stallAfter, MaxCaptures: 6, Capturer: fc, Logger: slog.New(&logRecorder{})})

	client, err := statsd.New(strings.TrimPrefix(p.Addr(), "udp://"),
		statsd.WithoutClientSideAggregation(), statsd.WithBufferFlushInterval(10*time.Millisecond),
		statsd.WithTags([]string{"env:test"}))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		for i := 0; ; i++ {
			client.Gauge("app.heartbeat", float64(i), []string{"beat:yes"}, 1)
			client.Incr("app.requests", []string{"route:/x"}, 1)
			client.Histogram("app.latency", float64(i%7), nil, 1)
			client.Event(&statsd.Event{Title: "tick", Text: fmt.Sprint(i)})
			select {
			case <-stop:
				client.Close() // flushes what is buffered
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	fc.expectNone(t, 3*stallAfter/2)
	close(stop)
	<-clientDone
	tr := fc.expect(t, stallAfter+time.Second)
	if tr.Kind != model.Stall || !strings.HasPrefix(tr.Source, "statsd udp://127.0.0.1:") {
		t.Errorf("trigger %+v", tr)
	}
	mu.Lock()
	sent := received
	mu.Unlock()
	if len(sent) < 10 {
		t.Fatalf("proxy received only %d datagrams", len(sent))
	}
	sameDatagrams(t, ag.waitFor(t, len(sent)), sent)
	st := p.Stats()
	if st.Malformed != 0 || st.Beats == 0 || st.Dropped != 0 {
		t.Errorf("stats %+v: the client's datagrams are all valid and some are heartbeats", st)
	}
}
