package capture

import (
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/internal/kernelctx"
	"github.com/stallwatch/stallwatch/model"
)

// kernelWatch reads the target's kernel context (package
// internal/kernelctx): at a capture's start and end with every thread's
// counters, and, while a flight recorder runs, every kernelEvery without
// them, so that a capture has a reading from near its history's start.
type kernelWatch struct {
	r *kernelctx.Reader
	// log reports a reading that failed; the capture goes on without it.
	log func(msg string, args ...any)

	mu      sync.Mutex
	past    []*kernelctx.Reading // oldest first, at most kernelKept
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// kernelKept bounds the readings kept for history baselines.
const kernelKept = 8

// kernelEvery is how often a session with a flight recorder reads the
// kernel context: a quarter of its history, between one and thirty
// seconds (a reading costs well under a millisecond without threads).
func kernelEvery(history time.Duration) time.Duration {
	return min(max(history/4, time.Second), 30*time.Second)
}

// newKernelWatch prepares to read pid's kernel context.
func newKernelWatch(pid int, log func(string, ...any)) *kernelWatch {
	return &kernelWatch{r: kernelctx.NewReader(pid), log: log}
}

// every starts the periodic readings of a flight recorder's history.
func (k *kernelWatch) every(history time.Duration) {
	if history <= 0 || k.stop != nil {
		return
	}
	k.stop, k.done = make(chan struct{}), make(chan struct{})
	k.keep(k.read(false))
	go k.loop(kernelEvery(history))
}

func (k *kernelWatch) loop(every time.Duration) {
	defer close(k.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.keep(k.read(false))
		}
	}
}

func (k *kernelWatch) keep(rd *kernelctx.Reading) {
	if rd == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.past = append(k.past, rd)
	if len(k.past) > kernelKept {
		k.past = k.past[len(k.past)-kernelKept:]
	}
}

// read takes a reading; nil when the target is gone.
func (k *kernelWatch) read(threads bool) *kernelctx.Reading {
	rd, err := k.r.Read(threads)
	if err != nil {
		k.log("reading the kernel context", "err", err)
		return nil
	}
	return rd
}

// readAsync takes a reading beside whatever the caller does meanwhile
// (the snapshot, symbolization); the function returned waits for it.
func (k *kernelWatch) readAsync(threads bool) func() *kernelctx.Reading {
	done := make(chan *kernelctx.Reading, 1)
	go func() { done <- k.read(threads) }()
	return sync.OnceValue(func() *kernelctx.Reading { return <-done })
}

// since is the newest periodic reading taken at or before mono
// (CLOCK_MONOTONIC ns), else the oldest one; nil without any.
func (k *kernelWatch) since(mono uint64) *kernelctx.Reading {
	k.mu.Lock()
	defer k.mu.Unlock()
	var best *kernelctx.Reading
	for _, rd := range k.past {
		if rd.Mono <= mono || best == nil {
			best = rd
		}
	}
	return best
}

// Close stops the periodic readings (once, however often it is called).
func (k *kernelWatch) Close() {
	if k == nil || k.stop == nil {
		return
	}
	k.stopped.Do(func() { close(k.stop) })
	<-k.done
}

// kernelReadings are a capture's readings of the kernel context: from
// its history's start (base, nil without a flight recorder), its start
// and its end (end waits for the reading taken while the capture's
// samples are resolved).
type kernelReadings struct {
	base, start *kernelctx.Reading
	end         func() *kernelctx.Reading
}

// windows makes capture.json's kernel context (start to end) and its
// history's (base to start).
func (k kernelReadings) windows() (during, before *model.KernelContext) {
	if k.end == nil {
		return nil, nil
	}
	end := k.end()
	if k.start != nil && end != nil {
		during = kernelctx.Between(k.start, end)
	}
	if k.base != nil && k.start != nil && k.base.Mono < k.start.Mono {
		before = kernelctx.Between(k.base, k.start)
	}
	return during, before
}
