package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/upload"
)

func logger(b *testutil.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), entrySuffix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// capture writes a capture directory with a valid profile.
func capture(t *testing.T, root string) string {
	t.Helper()
	now := time.Now()
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu-samples", Unit: "count"}}, TimeNanos: now.UnixNano()}
	return intaketest.WriteCapture(t, root, model.Info{Trigger: model.Stall, PID: 4242, Start: now.Add(-time.Second), End: now}, p, nil)
}

// deliverer uploads a queued capture directory as stallwatch does.
func deliverer(u *upload.Uploader) Deliver {
	return func(ctx context.Context, it Item) error {
		p, err := upload.Load(it.Key)
		if err != nil {
			return err
		}
		return u.Upload(ctx, p)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestDeliveredOnceAfterRestart: the agent is down when a capture is
// queued; stallwatch retries, then stops; a new stallwatch opens the same
// queue, the agent comes up, and the capture arrives exactly once.
func TestDeliveredOnceAfterRestart(t *testing.T) {
	root := t.TempDir()
	spoolDir := filepath.Join(root, ".upload-queue")
	dir := capture(t, root)
	addr := freePort(t) // nothing listens: connection refused
	u, err := upload.New(upload.Config{URL: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	cfg := Config{Dir: spoolDir, Deliver: deliverer(u), Retryable: upload.Retryable,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: logger(&logs)}

	first, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Add(Item{Key: dir, Size: 1000}); err != nil {
		t.Fatal(err)
	}
	if !first.Pending(dir) {
		t.Fatal("the queued capture is not pending")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	if err := testutil.Eventually(10*time.Second, func() bool { return first.Stats().Retries >= 3 }); err != nil {
		t.Fatalf("no retries while the agent is down: %+v", first.Stats())
	}
	cancel()
	<-done
	first.Close()
	if n := len(entries(t, spoolDir)); n != 1 {
		t.Fatalf("%d entries on disk after the first run, want 1", n)
	}
	if !strings.Contains(logs.String(), "upload failed; it stays queued") {
		t.Errorf("the failure was not logged:\n%s", logs.String())
	}

	intake := intaketest.StartAt(t, addr)
	second, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st := second.Stats(); st.Queued != 1 || !second.Pending(dir) {
		t.Fatalf("the restarted spool lost the item: %+v", st)
	}
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- second.Run(ctx) }()
	intake.Wait(t, 1, 10*time.Second)
	if err := testutil.Eventually(10*time.Second, func() bool { return second.Stats().Delivered == 1 }); err != nil {
		t.Fatalf("not delivered: %+v", second.Stats())
	}
	cancel()
	<-done
	second.Close()
	if n := len(entries(t, spoolDir)); n != 0 || second.Pending(dir) {
		t.Fatalf("%d entries left after delivery", n)
	}
	// A third start finds nothing to send again.
	third, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if st := third.Stats(); st.Queued != 0 {
		t.Fatalf("delivered item queued again: %+v", st)
	}
	if got := intake.Uploads(); len(got) != 1 {
		t.Fatalf("%d uploads, want exactly 1", len(got))
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the capture itself is gone: %v", err)
	}
}

// TestByteBound: a queue at its byte bound drops the oldest, says so and
// counts it; the capture directory itself stays.
func TestByteBound(t *testing.T) {
	root := t.TempDir()
	var logs testutil.Buffer
	s, err := Open(Config{Dir: filepath.Join(root, "q"), MaxBytes: 250, Deliver: func(context.Context, Item) error { return nil }, Logger: logger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dirs := []string{capture(t, root), capture(t, root), capture(t, root)}
	for _, d := range dirs {
		if err := s.Add(Item{Key: d, Size: 100}); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Queued != 2 || st.Bytes != 200 || st.Dropped != 1 {
		t.Fatalf("stats %+v, want 2 queued, 200 bytes, 1 dropped", st)
	}
	if s.Pending(dirs[0]) || !s.Pending(dirs[1]) || !s.Pending(dirs[2]) {
		t.Error("not the oldest was dropped")
	}
	out := logs.String()
	if !strings.Contains(out, "upload dropped from the queue") || !strings.Contains(out, dirs[0]) || !strings.Contains(out, "over its bound of 250") {
		t.Errorf("the drop was not said:\n%s", out)
	}
	if n := len(entries(t, filepath.Join(root, "q"))); n != 2 {
		t.Errorf("%d entries on disk, want 2", n)
	}
	if _, err := os.Stat(dirs[0]); err != nil {
		t.Errorf("the dropped upload's capture was deleted: %v", err)
	}
	if err := s.Add(Item{Key: "huge", Size: 251}); err == nil || s.Pending("huge") {
		t.Error("an item larger than the bound was queued")
	}
}

// TestAgeBound: items older than MaxAge are dropped when the spool opens
// again, and it says so.
func TestAgeBound(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	nop := func(context.Context, Item) error { return nil }
	s, err := Open(Config{Dir: dir, MaxAge: 72 * time.Hour, Deliver: nop})
	if err != nil {
		t.Fatal(err)
	}
	old, fresh := "/captures/old", "/captures/fresh"
	if err := s.Add(Item{Key: old, Size: 1, Queued: time.Now().Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(Item{Key: fresh, Size: 1}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var logs testutil.Buffer
	s, err = Open(Config{Dir: dir, MaxAge: time.Hour, Deliver: nop, Logger: logger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Pending(old) || !s.Pending(fresh) || s.Stats().Dropped != 1 {
		t.Fatalf("stats %+v", s.Stats())
	}
	if out := logs.String(); !strings.Contains(out, old) || !strings.Contains(out, "longer than the queue's bound of 1h0m0s") {
		t.Errorf("the drop was not said:\n%s", out)
	}
}

// TestBackoff: failures in a row wait longer each time, with jitter, up
// to MaxBackoff; a success starts again from MinBackoff.
func TestBackoff(t *testing.T) {
	const minB, maxB = 100 * time.Millisecond, 3200 * time.Millisecond
	var mu sync.Mutex
	var waits []time.Duration
	fails := 20
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var s *Spool
	deliver := func(ctx context.Context, it Item) error {
		if fails > 0 {
			fails--
			return errors.New("agent down")
		}
		return nil
	}
	cfg := Config{Dir: t.TempDir(), Deliver: deliver, MinBackoff: minB, MaxBackoff: maxB, Logger: slog.New(slog.DiscardHandler)}
	cfg.rescan = time.Hour
	clock := time.Now()
	cfg.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	cfg.after = func(d time.Duration) <-chan time.Time {
		if d == time.Hour {
			cancel() // idle: everything was delivered
			return nil
		}
		mu.Lock()
		waits = append(waits, d)
		clock = clock.Add(d)
		mu.Unlock()
		c := make(chan time.Time, 1)
		c <- time.Now()
		return c
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Add(Item{Key: "k", Size: 1}); err != nil {
		t.Fatal(err)
	}
	s.Run(ctx)
	if st := s.Stats(); st.Delivered != 1 || st.Retries != 20 {
		t.Fatalf("stats %+v", st)
	}
	distinct := map[time.Duration]bool{}
	for i, w := range waits {
		ceil := min(minB<<i, maxB)
		if w < ceil/2 || w > ceil {
			t.Errorf("wait %d: %v, want within [%v, %v]", i+1, w, ceil/2, ceil)
		}
		if ceil == maxB {
			distinct[w] = true
		}
	}
	if len(distinct) < 3 {
		t.Errorf("waits at the ceiling have no jitter: %v", waits)
	}
}

// TestRefused: a failure retrying cannot fix drops the item, logged and
// counted, and the next one is delivered.
func TestRefused(t *testing.T) {
	errRefused := errors.New("400 bad request")
	var delivered []string
	var logs testutil.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Dir: t.TempDir(), Logger: logger(&logs),
		Deliver: func(_ context.Context, it Item) error {
			if it.Key == "bad" {
				return errRefused
			}
			delivered = append(delivered, it.Key)
			return nil
		},
		Retryable: func(err error) bool { return !errors.Is(err, errRefused) },
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add(Item{Key: "bad", Size: 1})
	s.Add(Item{Key: "good", Size: 1})
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	if err := testutil.Eventually(5*time.Second, func() bool { st := s.Stats(); return st.Queued == 0 }); err != nil {
		t.Fatalf("stats %+v", s.Stats())
	}
	cancel()
	<-done
	if st := s.Stats(); st.Refused != 1 || st.Delivered != 1 || len(delivered) != 1 || delivered[0] != "good" {
		t.Fatalf("stats %+v, delivered %v", st, delivered)
	}
	if !strings.Contains(logs.String(), "upload refused") {
		t.Errorf("the refusal was not logged:\n%s", logs.String())
	}
}

// TestOneDeliverer: two processes on one queue (here two spools): one
// delivers, the other only adds, and the first picks its items up.
func TestOneDeliverer(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	got := map[string]int{}
	deliver := func(_ context.Context, it Item) error {
		mu.Lock()
		got[it.Key]++
		mu.Unlock()
		return nil
	}
	a, err := Open(Config{Dir: dir, Deliver: deliver, rescan: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var logs testutil.Buffer
	b, err := Open(Config{Dir: dir, Deliver: deliver, rescan: 20 * time.Millisecond, Logger: logger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !strings.Contains(logs.String(), "another stallwatch delivers") {
		t.Errorf("the second spool did not say it only adds:\n%s", logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Run(ctx)
	go b.Run(ctx)
	for _, k := range []string{"x", "y", "z"} {
		if err := b.Add(Item{Key: k, Size: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := testutil.Eventually(10*time.Second, func() bool { return a.Stats().Delivered == 3 }); err != nil {
		t.Fatalf("a delivered %+v", a.Stats())
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"x", "y", "z"} {
		if got[k] != 1 {
			t.Errorf("%s delivered %d times", k, got[k])
		}
	}
	if b.Stats().Delivered != 0 {
		t.Errorf("the spool without the lock delivered: %+v", b.Stats())
	}
}

// TestUnreadableEntry: an entry file that is not one is removed, said
// and counted; the others stay.
func TestUnreadableEntry(t *testing.T) {
	dir := t.TempDir()
	nop := func(context.Context, Item) error { return nil }
	s, err := Open(Config{Dir: dir, Deliver: nop})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(Item{Key: "ok", Size: 1})
	s.Close()
	for name, data := range map[string]string{
		"0000000000000000001-000001-00000000.json": "{not json",
		"0000000000000000002-000001-00000000.json": `{"key":"","size":1,"queued":"2026-01-01T00:00:00Z"}`,
		".tmp-123": "half written by a crash",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	var logs testutil.Buffer
	s, err = Open(Config{Dir: dir, Deliver: nop, Logger: logger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Stats(); st.Unreadable != 2 || st.Queued != 1 || !s.Pending("ok") {
		t.Fatalf("stats %+v", st)
	}
	if n := strings.Count(logs.String(), "upload queue entry unreadable"); n != 2 {
		t.Errorf("%d unreadable entries said, want 2:\n%s", n, logs.String())
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 {
		t.Errorf("%d files left, want the good entry only", len(left))
	}
}

// TestUnsafeDirectory: stallwatch writes the queue as root; a directory
// another user can write is refused, saying how to fix it.
func TestUnsafeDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Config{Dir: dir, Deliver: func(context.Context, Item) error { return nil }})
	if !errors.Is(err, safedir.ErrUnsafe) {
		t.Fatalf("a world-writable queue directory: %v", err)
	}
}

// TestDrain: Drain returns when Run has delivered everything, or at its
// deadline with what is left.
func TestDrain(t *testing.T) {
	release := make(chan struct{})
	s, err := Open(Config{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Deliver: func(ctx context.Context, it Item) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add(Item{Key: "a", Size: 1})
	s.Add(Item{Key: "b", Size: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	short, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	if n := s.Drain(short); n != 2 {
		t.Errorf("Drain at its deadline left %d, want 2", n)
	}
	close(release)
	if n := s.Drain(context.Background()); n != 0 {
		t.Errorf("Drain left %d", n)
	}
}

// TestCloseWhileRunning: Close while Run scans and Add writes (a watch that
// exits mid-delivery). The descriptor is never used after it was closed —
// the kernel would have given its number to the next open — Run stops with
// ErrClosed, and an Add after Close says so.
func TestCloseWhileRunning(t *testing.T) {
	dir := t.TempDir()
	nop := func(context.Context, Item) error { return nil }
	s, err := Open(Config{Dir: dir, Deliver: nop, rescan: time.Microsecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.Run(context.Background()) }()
	added := make(chan struct{})
	go func() {
		defer close(added)
		for i := 0; ; i++ {
			if err := s.Add(Item{Key: fmt.Sprint(i), Size: 1}); err != nil {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("Add during Close: %v", err)
				}
				return
			}
		}
	}()
	if err := testutil.Eventually(10*time.Second, func() bool { return s.Stats().Delivered >= 10 }); err != nil {
		t.Fatalf("nothing delivered: %+v", s.Stats())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Run after Close returned %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run goes on after Close")
	}
	<-added
	if err := s.Add(Item{Key: "late", Size: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
}

// TestAgentDownHoldsAll: an agent that fails every upload gets no more
// tries from a queue of five than from a queue of one (within 2×): the
// items failing one after another hold the whole queue, with the same
// backoff, and per-item backoff does not become five times the load.
func TestAgentDownHoldsAll(t *testing.T) {
	tries := func(items int) int {
		var mu sync.Mutex
		clock := time.Now()
		start := clock
		n := 0
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg := Config{Dir: t.TempDir(), MinBackoff: 100 * time.Millisecond, MaxBackoff: 3200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			Deliver: func(context.Context, Item) error {
				mu.Lock()
				defer mu.Unlock()
				n++
				if clock.Sub(start) > time.Minute {
					cancel()
				}
				return errors.New("agent down")
			}}
		cfg.rescan = time.Hour
		cfg.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		cfg.after = func(d time.Duration) <-chan time.Time {
			mu.Lock()
			clock = clock.Add(d)
			mu.Unlock()
			c := make(chan time.Time, 1)
			c <- time.Now()
			return c
		}
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i := range items {
			if err := s.Add(Item{Key: fmt.Sprint("k", i), Size: 1}); err != nil {
				t.Fatal(err)
			}
		}
		s.Run(ctx)
		return n
	}
	one, five := tries(1), tries(5)
	t.Logf("tries in a minute of a down agent: %d for one item, %d for five", one, five)
	if five > 2*one {
		t.Errorf("five items made %d tries in a minute, one item %d: the queue does not back off as a whole", five, one)
	}
}

// TestBackoffBounds: the wait after the n-th failure in a row is within
// [MaxBackoff/2, MaxBackoff] once the doubling reaches it, however many
// failures there were (the 35th of a 1 s backoff overflowed and panicked).
func TestBackoffBounds(t *testing.T) {
	s := &Spool{cfg: Config{MinBackoff: time.Second, MaxBackoff: 5 * time.Minute}}
	for n := 1; n <= 10_000; n++ {
		w := s.backoff(n)
		ceil := min(time.Second<<min(n-1, 20), 5*time.Minute)
		if w < ceil/2 || w > ceil {
			t.Fatalf("failure %d: wait %v, want within [%v, %v]", n, w, ceil/2, ceil)
		}
	}
}

// TestHostileEntries: entries another process could leave in the queue's
// directory: a FIFO (reading it would block) and a symbolic link out of
// it are never opened (not regular files: not the queue's), one over the
// entry's size bound and one with a negative size are refused, said and
// removed; the good one stays, and Open never blocks.
func TestHostileEntries(t *testing.T) {
	dir := t.TempDir()
	nop := func(context.Context, Item) error { return nil }
	s, err := Open(Config{Dir: dir, Deliver: nop})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(Item{Key: "ok", Size: 1})
	s.Close()
	name := func(i int) string { return fmt.Sprintf("%019d-000001-00000000%s", i, entrySuffix) }
	if err := syscall.Mkfifo(filepath.Join(dir, name(1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, name(2))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name(3)), []byte(`{"key":"big","size":1,"queued":"2026-01-01T00:00:00Z","data":"`+strings.Repeat("x", 1<<20)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name(4)), []byte(`{"key":"neg","size":-5,"queued":"2026-01-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	opened := make(chan error, 1)
	go func() {
		var err error
		s, err = Open(Config{Dir: dir, Deliver: nop, Logger: logger(&logs)})
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open blocked on the queue's entries")
	}
	defer s.Close()
	if st := s.Stats(); st.Unreadable != 2 || st.Queued != 1 || !s.Pending("ok") {
		t.Errorf("stats %+v, want 2 refused and the good one queued; log:\n%s", st, logs.String())
	}
	if n := strings.Count(logs.String(), "upload queue entry unreadable"); n != 2 {
		t.Errorf("%d refusals said, want 2; log:\n%s", n, logs.String())
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("the link's target: %v", err)
	}
}

// TestAgentUnreachedKeepsOrder: while the agent cannot be reached (the
// failure is the agent's, Unreached), the items keep their places and
// the queue waits as a whole; once it is back they go in the order they
// were queued, each once. Without Unreached, each item's own backoff
// grows with its own tries and a newer one whose wait ended first goes
// ahead (the order of a continuous profile's periods scrambled).
func TestAgentUnreachedKeepsOrder(t *testing.T) {
	deliveries := func(unreached bool) []string {
		var mu sync.Mutex
		clock := time.Now()
		start := clock
		var got []string
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		down := errors.New("dial tcp 127.0.0.1:8126: connect: connection refused")
		cfg := Config{Dir: t.TempDir(), MinBackoff: 100 * time.Millisecond, MaxBackoff: 3200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
		var s *Spool
		cfg.Deliver = func(_ context.Context, it Item) error {
			mu.Lock()
			defer mu.Unlock()
			if clock.Sub(start) < 20*time.Second {
				if len(got) == 0 && clock.Sub(start) > 5*time.Second {
					mu.Unlock()
					// A later period is queued while the agent is down.
					if err := s.Add(Item{Key: "k3", Size: 1}); err != nil {
						t.Error(err)
					}
					mu.Lock()
					got = append(got, "added")
				}
				return down
			}
			got = append(got, it.Key)
			if len(got) == 5 {
				cancel()
			}
			return nil
		}
		if unreached {
			cfg.Unreached = func(err error) bool { return err == down }
		}
		cfg.rescan = time.Hour
		cfg.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		cfg.after = func(d time.Duration) <-chan time.Time {
			mu.Lock()
			clock = clock.Add(d)
			mu.Unlock()
			c := make(chan time.Time, 1)
			c <- time.Now()
			return c
		}
		var err error
		if s, err = Open(cfg); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, k := range []string{"k0", "k1", "k2"} {
			if err := s.Add(Item{Key: k, Size: 1}); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the queue did not deliver its items")
		}
		return got
	}
	if got := deliveries(true); !slices.Equal(got, []string{"added", "k0", "k1", "k2", "k3"}) {
		t.Errorf("delivered %v, want k0, k1, k2, k3 in order, each once", got)
	}
	t.Logf("without Unreached: %v", deliveries(false))
}
