package dogstatsd

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// logRecorder is a slog handler that keeps every record, for tests that
// assert on the log lines a user reads.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// find returns the first record whose message contains msg.
func (l *logRecorder) find(msg string) (slog.Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if strings.Contains(r.Message, msg) {
			return r, true
		}
	}
	return slog.Record{}, false
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// beatCounter counts a source's beats.
type beatCounter struct {
	n  atomic.Int64
	ch chan struct{}
}

// runSource runs p until the test ends and counts its beats.
func runSource(t *testing.T, p *Proxy) *beatCounter {
	t.Helper()
	bc := &beatCounter{ch: make(chan struct{}, 1000)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, func() {
			bc.n.Add(1)
			select {
			case bc.ch <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Run returned %v after cancel, want context.Canceled", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: Run did not return after cancel", p)
		}
	})
	return bc
}

// expectBeat waits for one beat.
func (bc *beatCounter) expectBeat(t *testing.T, what string, within time.Duration) {
	t.Helper()
	select {
	case <-bc.ch:
	case <-time.After(within):
		t.Fatalf("no beat within %v after %s", within, what)
	}
}

// expectQuiet asserts no beat arrives for d.
func (bc *beatCounter) expectQuiet(t *testing.T, what string, d time.Duration) {
	t.Helper()
	select {
	case <-bc.ch:
		t.Fatalf("beat after %s", what)
	case <-time.After(d):
	}
}
