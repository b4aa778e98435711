package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/stallwatch/stallwatch/watchdog"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd"
	"github.com/stallwatch/stallwatch/watchdog/dogstatsd/tap"
)

// taps are the daemon's DogStatsD taps, one packet socket per port, open
// while a watched process has a heartbeat on it.
type taps struct {
	log *slog.Logger

	mu     sync.Mutex
	byPort map[uint16]*tapEntry
	ofPID  map[int]uint16
}

type tapEntry struct {
	tap    *tap.Tap
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
	refs   int
}

func newTaps(log *slog.Logger) *taps {
	return &taps{log: log, byPort: map[uint16]*tapEntry{}, ofPID: map[int]uint16{}}
}

// source returns pid's heartbeat on the tap of addr, opening the tap if
// need be.
func (ts *taps) source(addr string, pid int, metric string, tags []string) (watchdog.Source, error) {
	port, err := tap.ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	m, err := dogstatsd.NewMetricMatcher(metric, tags)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, dup := ts.ofPID[pid]; dup {
		return nil, fmt.Errorf("pid %d has a tap heartbeat already", pid)
	}
	e := ts.byPort[port]
	if e == nil {
		t, err := tap.Open(addr, ts.log)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		e = &tapEntry{tap: t, addr: addr, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(e.done)
			if err := t.Run(ctx); err != nil && ctx.Err() == nil {
				ts.log.Error("the DogStatsD tap stopped", "tap", addr, "err", err)
			}
		}()
		ts.byPort[port] = e
		ts.log.Info("reading DogStatsD datagrams from a packet socket", "tap", addr, "port", port)
	}
	e.refs++
	ts.ofPID[pid] = port
	return e.tap.Source(pid, m), nil
}

// release drops pid's heartbeat; the last one closes its tap.
func (ts *taps) release(pid int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	port, ok := ts.ofPID[pid]
	if !ok {
		return
	}
	delete(ts.ofPID, pid)
	e := ts.byPort[port]
	e.refs--
	if e.refs == 0 {
		delete(ts.byPort, port)
		e.stop()
	}
}

func (e *tapEntry) stop() {
	e.cancel()
	<-e.done
	e.tap.Close()
}

func (ts *taps) status() []TapStatus {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []TapStatus
	for _, e := range ts.byPort {
		st := e.tap.Stats()
		out = append(out, TapStatus{Addr: e.addr, Packets: st.Packets, Attributed: st.Attributed, KernelDrops: st.KernelDrops, Malformed: st.Malformed})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

func (ts *taps) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for port, e := range ts.byPort {
		delete(ts.byPort, port)
		e.stop()
	}
	ts.ofPID = map[int]uint16{}
}
