package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

var discard = slog.New(slog.DiscardHandler)

var root = owner{Rule: "r", UID: 0}

// writeCapture makes a capture directory of n bytes under out.
func writeCapture(t *testing.T, out, name string, n int) {
	t.Helper()
	d := filepath.Join(out, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "profile.pb.gz"), make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestQuota(t *testing.T) {
	out := t.TempDir()
	names := []string{"20260101T000000.000Z-1-stall", "20260101T000001.000Z-2-stall", "20260101T000002.000Z-3-stall"}
	for _, n := range names[:2] {
		writeCapture(t, out, n, 400)
	}
	writeCapture(t, out, "not-a-capture", 10_000) // never counted, never removed
	q, err := openQuota(out, 1000, nil, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	if used, _, n := q.usage(); used != 800 || n != 2 {
		t.Fatalf("usage %d in %d captures, want 800 in 2", used, n)
	}
	writeCapture(t, out, names[2], 400)
	q.written(filepath.Join(out, names[2]))
	if used, _, n := q.usage(); used != 800 || n != 2 {
		t.Errorf("after a capture over the quota: %d in %d, want the oldest removed", used, n)
	}
	if _, err := os.Stat(filepath.Join(out, names[0])); !os.IsNotExist(err) {
		t.Errorf("the oldest capture is still there")
	}
	if _, err := os.Stat(filepath.Join(out, "not-a-capture")); err != nil {
		t.Errorf("a directory that is not a capture was removed")
	}
	// One capture larger than the quota: kept, and further captures refused.
	writeCapture(t, out, "20260101T000003.000Z-4-stall", 5000)
	q.written(filepath.Join(out, "20260101T000003.000Z-4-stall"))
	var le *LimitError
	if err := q.check(); !errors.As(err, &le) || le.What != "disk-quota" {
		t.Errorf("check over the quota: %v", err)
	}
	q.setLimit(0)
	if err := q.check(); err != nil {
		t.Errorf("no quota: %v", err)
	}
}

func TestLimits(t *testing.T) {
	q, err := openQuota(t.TempDir(), 0, nil, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	st, err := openState(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := newLimits(1, 2, 1, st, q)
	ctx := context.Background()
	rel, err := l.acquire(ctx, model.Stall, root, discard)
	if err != nil {
		t.Fatal(err)
	}
	// The one slot is taken: a second capture waits for it.
	got := make(chan error, 1)
	go func() {
		r, err := l.acquire(ctx, model.Signal, root, discard)
		if err == nil {
			r(false)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second capture did not wait for the slot: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	rel(true)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Two stall captures an hour: the third is refused; signals are not counted.
	r, err := l.acquire(ctx, model.Stall, root, discard)
	if err != nil {
		t.Fatal(err)
	}
	r(true)
	_, err = l.acquire(ctx, model.Stall, root, discard)
	var le *LimitError
	if !errors.As(err, &le) || le.What != "max-captures-per-hour" || !strings.Contains(err.Error(), "2 stall captures") {
		t.Errorf("third stall capture: %v", err)
	}
	if r, err := l.acquire(ctx, model.Signal, root, discard); err != nil {
		t.Errorf("a capture asked for is not bounded by the hour: %v", err)
	} else {
		r(false)
	}
	// The history survives a restart.
	l2 := newLimits(1, 2, 1, st, q)
	if _, n := l2.counts(); n != 2 {
		t.Errorf("after a restart, %d stall captures in the last hour, want 2", n)
	}
	// Waiting is cut short by the context.
	hold, _ := l2.acquire(ctx, model.Signal, root, discard)
	defer hold(false)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l2.acquire(cctx, model.Signal, root, discard); err == nil {
		t.Errorf("waiting for a slot outlived its context")
	}
}

// TestQuotaSparesPendingUploads: over the quota, captures whose upload is
// still queued are removed only after every other one, oldest first.
func TestQuotaSparesPendingUploads(t *testing.T) {
	out := t.TempDir()
	names := []string{"20260101T000000.000Z-1-stall", "20260101T000001.000Z-2-stall", "20260101T000002.000Z-3-stall", "20260101T000003.000Z-4-stall"}
	for _, n := range names[:3] {
		writeCapture(t, out, n, 400)
	}
	pending := map[string]bool{filepath.Join(out, names[0]): true, filepath.Join(out, names[1]): true}
	q, err := openQuota(out, 1300, func(abs string) bool { return pending[abs] }, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(out, name))
		return err == nil
	}
	// 1,600 bytes: one must go. Not the two oldest, whose uploads wait.
	writeCapture(t, out, names[3], 400)
	q.written(filepath.Join(out, names[3]))
	if !exists(names[0]) || !exists(names[1]) || exists(names[2]) || !exists(names[3]) {
		t.Errorf("after the fourth capture: %v %v %v %v, want the third removed (its upload done)", exists(names[0]), exists(names[1]), exists(names[2]), exists(names[3]))
	}
	// A tighter quota: the pending ones go too, oldest first, never the
	// newest.
	q.setLimit(500)
	if exists(names[0]) || exists(names[1]) || !exists(names[3]) {
		t.Errorf("quota 500: %v %v %v, want only the newest left", exists(names[0]), exists(names[1]), exists(names[3]))
	}
	if used, _, n := q.usage(); used != 400 || n != 1 {
		t.Errorf("usage %d in %d, want 400 in 1", used, n)
	}
}

// TestLimitShares: no user's processes, and no rule of several, take more
// than half the host's stall captures an hour; a capture that was not
// written costs nothing.
func TestLimitShares(t *testing.T) {
	q, err := openQuota(t.TempDir(), 0, nil, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	st, _ := openState("")
	l := newLimits(4, 6, 2, st, q)
	l.watching(0, 1)
	l.watching(65534, 12)
	ctx := context.Background()
	take := func(who owner, written bool) error {
		r, err := l.acquire(ctx, model.Stall, who, discard)
		if err == nil {
			r(written)
		}
		return err
	}
	nobody := owner{Rule: "app", UID: 65534}
	for i := range 10 {
		if err := take(nobody, false); err != nil {
			t.Fatalf("capture %d not written, yet counted: %v", i, err)
		}
	}
	for i := range 3 {
		if err := take(nobody, true); err != nil {
			t.Fatalf("nobody's capture %d of its share 3: %v", i, err)
		}
	}
	var le *LimitError
	if err := take(nobody, true); !errors.As(err, &le) || !strings.Contains(err.Error(), "user 65534") {
		t.Errorf("nobody's fourth: %v, want its user's share refused", err)
	}
	if err := take(owner{Rule: "app", UID: 0}, true); !errors.As(err, &le) || !strings.Contains(err.Error(), `rule "app"`) {
		t.Errorf("root's under the same rule: %v, want the rule's share refused", err)
	}
	for i := range 3 {
		if err := take(owner{Rule: "db", UID: 0}, true); err != nil {
			t.Fatalf("root's capture %d under another rule: %v", i, err)
		}
	}
	if err := take(owner{Rule: "other", UID: 1000}, true); !errors.As(err, &le) || !strings.Contains(err.Error(), "on this host") {
		t.Errorf("past the host's 6: %v", err)
	}
	if _, n := l.counts(); n != 6 {
		t.Errorf("%d counted, want the 6 written", n)
	}
	// With one rule and one user's processes, they may take the host's
	// whole hour.
	l1 := newLimits(4, 4, 1, st, q)
	l1.watching(1, 2)
	for i := range 4 {
		r, err := l1.acquire(ctx, model.Stall, owner{Rule: "only", UID: 1}, discard)
		if err != nil {
			t.Fatalf("capture %d under the only rule: %v", i, err)
		}
		r(true)
	}
}
