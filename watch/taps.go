package watch

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

// Taps are the DogStatsD taps of a stallwatch process, one packet socket
// per port, open while a watched process has a heartbeat on it: the
// daemon's targets share them, `watch` has one.
type Taps struct {
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

// NewTaps returns taps that log to log; none is open until a heartbeat
// asks for one.
func NewTaps(log *slog.Logger) *Taps {
	return &Taps{log: log, byPort: map[uint16]*tapEntry{}, ofPID: map[int]uint16{}}
}

// source returns pid's heartbeat on the tap of addr, opening the tap if
// need be.
func (ts *Taps) source(addr string, pid int, metric string, tags []string) (watchdog.Source, error) {
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
func (ts *Taps) release(pid int) {
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
		ts.stop(e)
	}
}

// stop ends a tap and says what the kernel dropped for want of room: a
// dropped datagram may have been a missed heartbeat.
func (ts *Taps) stop(e *tapEntry) {
	e.cancel()
	<-e.done
	e.tap.Close()
	if st := e.tap.Stats(); st.KernelDrops > 0 {
		ts.log.Warn("the kernel dropped DogStatsD datagrams the tap had no room for", "tap", e.addr, "dropped", st.KernelDrops, "read", st.Packets)
	}
}

// TapStats are one open tap's counts.
type TapStats struct {
	Addr string
	tap.Stats
}

// Stats are the open taps' counts, by address.
func (ts *Taps) Stats() []TapStats {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []TapStats
	for _, e := range ts.byPort {
		out = append(out, TapStats{Addr: e.addr, Stats: e.tap.Stats()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// Close closes every tap.
func (ts *Taps) Close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for port, e := range ts.byPort {
		delete(ts.byPort, port)
		ts.stop(e)
	}
	ts.ofPID = map[int]uint16{}
}
