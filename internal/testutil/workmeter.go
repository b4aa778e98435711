package testutil

import (
	"fmt"
	"sync"
	"time"
)

// WorkMeter follows a target's "work ITERATIONS CPU_NS" reports
// (testdata/spin, testdata/python/pywork.py): the work it has done and
// the CPU time it has used, so that a benchmark measures what sampling
// costs it as work per CPU second — what sampling takes from the target
// is charged to its CPU time, so the figure holds on a host others keep
// busy too.
type WorkMeter struct {
	mu        sync.Mutex
	iter, cpu uint64
	seen      chan struct{}
}

// MeterWork reads tg's standard output for its reports.
func MeterWork(tg *Target) *WorkMeter {
	w := &WorkMeter{seen: make(chan struct{}, 1)}
	go func() {
		for {
			line, err := tg.Stdout.ReadString('\n')
			var it, cpu uint64
			if n, _ := fmt.Sscanf(line, "work %d %d", &it, &cpu); n == 2 {
				w.mu.Lock()
				w.iter, w.cpu = it, cpu
				w.mu.Unlock()
				select {
				case w.seen <- struct{}{}:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return w
}

// Next waits for a report made after the call and returns it.
func (w *WorkMeter) Next() (iter, cpu uint64) {
	select {
	case <-w.seen: // one made before
	default:
	}
	<-w.seen
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.iter, w.cpu
}

// Rate is the target's work per CPU second over about d.
func (w *WorkMeter) Rate(d time.Duration) float64 {
	i0, c0 := w.Next()
	time.Sleep(d)
	i1, c1 := w.Next()
	return float64(i1-i0) / (float64(c1-c0) / 1e9)
}
