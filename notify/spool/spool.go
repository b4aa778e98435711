package spool

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// Defaults for Config's bounds and backoff.
const (
	DefaultMaxAge     = 24 * time.Hour
	DefaultMaxBytes   = 1 << 30
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 5 * time.Minute
	// rescanEvery is how often a spool looks for items another process
	// added, and tries again to take a directory another process holds.
	rescanEvery = 30 * time.Second
)

// Item is one queued delivery.
type Item struct {
	// Key says what the item is for (an upload: the capture directory);
	// Pending asks by it, and logs name it.
	Key string `json:"key"`
	// Size is the bytes the item stands for, counted against MaxBytes.
	Size   int64     `json:"size"`
	Queued time.Time `json:"queued"`
	// Data is the deliverer's, kept as it was given.
	Data json.RawMessage `json:"data,omitempty"`

	name string // its file in the spool

	// Its own backoff, in memory: failed tries in a row, and when it may
	// be tried again.
	failures int
	next     time.Time
}

// Deliver delivers one item; nil means done.
type Deliver func(ctx context.Context, it Item) error

// Config configures a Spool.
type Config struct {
	Dir      string
	MaxAge   time.Duration // default DefaultMaxAge
	MaxBytes int64         // default DefaultMaxBytes
	Deliver  Deliver
	// Retryable says whether a failed delivery may succeed later; nil
	// retries every failure.
	Retryable func(error) bool
	// Unconfirmed says whether a failure may have delivered the item all
	// the same (the agent took the whole upload and did not answer in
	// time): it is not tried again, so that the agent does not get it
	// twice, and it is counted and said. nil: none is.
	Unconfirmed func(error) bool
	// Unreached says whether a failure is the destination's alone: it
	// could not be reached, nothing was sent (the agent is down). The
	// item keeps its place and the whole queue waits, so that once the
	// agent is back the items go in the order they were queued. nil:
	// every failure is the item's too.
	Unreached              func(error) bool
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger

	// after waits; tests record the backoffs asked for.
	after  func(time.Duration) <-chan time.Time
	now    func() time.Time
	rescan time.Duration // default rescanEvery
}

// Stats count what happened to the items since Open.
type Stats struct {
	Queued    int   // waiting now
	Bytes     int64 // their sizes
	Delivered int
	Retries   int // failed tries that were retried
	Dropped   int // over a bound (age or bytes)
	Refused   int // failures retrying cannot fix
	// Unconfirmed items were sent whole but not answered in time: the
	// agent may have them; they are not sent again.
	Unconfirmed int
	Unreadable  int // entry files that could not be read
}

// Spool is an on-disk queue with one deliverer.
type Spool struct {
	cfg Config
	log *slog.Logger
	st  *store

	mu      sync.Mutex
	items   []*Item // oldest first
	bytes   int64
	stats   Stats
	seq     int
	locked  bool
	wake    chan struct{}
	closing bool
	changed chan struct{} // closed, and replaced, when an item leaves
	// unreachedInARow counts the tries in a row that found no agent.
	unreachedInARow int
}

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("spool: closed")

// Open opens (creating it) the spool directory, reads the items a
// previous run left, and drops those over the bounds, saying so.
func Open(cfg Config) (*Spool, error) {
	if cfg.Dir == "" || cfg.Deliver == nil {
		return nil, errors.New("spool: no directory or deliverer")
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Retryable == nil {
		cfg.Retryable = func(error) bool { return true }
	}
	if cfg.Unconfirmed == nil {
		cfg.Unconfirmed = func(error) bool { return false }
	}
	if cfg.Unreached == nil {
		cfg.Unreached = func(error) bool { return false }
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.rescan <= 0 {
		cfg.rescan = rescanEvery
	}
	s := &Spool{cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1), changed: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	var err error
	if s.st, err = openStore(cfg.Dir); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if s.locked, err = s.st.tryLock(); err != nil {
		s.st.close()
		return nil, fmt.Errorf("spool: lock %s: %w", cfg.Dir, err)
	}
	if err := s.scan(); err != nil {
		s.st.close()
		return nil, err
	}
	if n := len(s.items); n > 0 {
		s.log.Info("uploads waiting from an earlier run", "queued", n, "bytes", s.bytes, "spool", cfg.Dir)
	}
	if !s.locked {
		s.log.Info("another stallwatch delivers from this upload queue; this one only adds to it", "spool", cfg.Dir)
	}
	return s, nil
}

// scan reads the directory: items not known yet join the queue, in order;
// then the bounds apply.
func (s *Spool) scan() error {
	names, err := s.st.list()
	if err != nil {
		return fmt.Errorf("spool: %s: %w", s.cfg.Dir, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	known := make(map[string]bool, len(s.items))
	for _, it := range s.items {
		known[it.name] = true
	}
	added := false
	for _, name := range names {
		if known[name] {
			continue
		}
		it, err := s.readItem(name)
		if err != nil {
			s.stats.Unreadable++
			s.log.Warn("upload queue entry unreadable; removing it", "spool", s.cfg.Dir, "entry", name, "err", err)
			_ = s.st.remove(name)
			continue
		}
		s.items = append(s.items, it)
		s.bytes += it.Size
		added = true
	}
	if added {
		sort.Slice(s.items, func(i, j int) bool { return s.items[i].name < s.items[j].name })
	}
	s.applyBoundsLocked()
	return nil
}

func (s *Spool) readItem(name string) (*Item, error) {
	data, err := s.st.read(name)
	if err != nil {
		return nil, err
	}
	var it Item
	if err := json.Unmarshal(data, &it); err != nil {
		return nil, err
	}
	if it.Key == "" || it.Size < 0 || it.Queued.IsZero() {
		return nil, fmt.Errorf("no key, a negative size or no time")
	}
	it.name = name
	return &it, nil
}

// Add queues it durably: when Add returns nil the item survives a crash.
// Queued is set if zero. An item that makes the queue exceed MaxBytes
// drops the oldest ones (logged); one larger than MaxBytes alone is not
// queued at all, and Add says so.
func (s *Spool) Add(it Item) error {
	if it.Queued.IsZero() {
		it.Queued = s.cfg.now()
	}
	if it.Size > s.cfg.MaxBytes {
		s.mu.Lock()
		s.stats.Dropped++
		s.mu.Unlock()
		s.log.Warn("upload not queued: larger than the queue's bound", "key", it.Key, "bytes", it.Size, "max_bytes", s.cfg.MaxBytes)
		return fmt.Errorf("spool: %s: %d bytes, over the bound of %d", it.Key, it.Size, s.cfg.MaxBytes)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed
	}
	s.seq++
	it.name = entryName(it.Queued, s.seq)
	s.mu.Unlock()
	data, err := json.Marshal(&it)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := s.st.write(it.name, data); err != nil {
		return fmt.Errorf("spool: queue %s: %w", it.Key, err)
	}
	s.mu.Lock()
	s.items = append(s.items, &it)
	s.bytes += it.Size
	sort.SliceStable(s.items, func(i, j int) bool { return s.items[i].name < s.items[j].name })
	s.applyBoundsLocked()
	s.mu.Unlock()
	s.poke()
	return nil
}

// entryName sorts by time queued: nanoseconds, then a sequence and a
// random part so that two processes adding at once never collide.
func entryName(t time.Time, seq int) string {
	var r [4]byte
	_, _ = crand.Read(r[:])
	return fmt.Sprintf("%019d-%06d-%s%s", t.UnixNano(), seq%1_000_000, hex.EncodeToString(r[:]), entrySuffix)
}

func (s *Spool) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// applyBoundsLocked drops items over MaxAge, then the oldest while the
// queue is over MaxBytes.
func (s *Spool) applyBoundsLocked() {
	now := s.cfg.now()
	keep := s.items[:0]
	for _, it := range s.items {
		if age := now.Sub(it.Queued); age > s.cfg.MaxAge {
			s.dropLocked(it, fmt.Sprintf("waited %v, longer than the queue's bound of %v", age.Round(time.Second), s.cfg.MaxAge))
			continue
		}
		keep = append(keep, it)
	}
	s.items = keep
	for len(s.items) > 0 && s.bytes > s.cfg.MaxBytes {
		it := s.items[0]
		s.items = s.items[1:]
		s.dropLocked(it, fmt.Sprintf("the queue holds %d bytes, over its bound of %d; the oldest goes", s.bytes, s.cfg.MaxBytes))
	}
}

// dropLocked removes an item for a bound, and says so.
func (s *Spool) dropLocked(it *Item, why string) {
	defer s.notifyLocked()
	s.bytes -= it.Size
	s.stats.Dropped++
	err := s.st.remove(it.name)
	s.log.Warn("upload dropped from the queue", "key", it.Key, "queued_at", it.Queued.UTC().Format(time.RFC3339), "why", why, "remove_err", err)
}

// notifyLocked wakes Drain: an item left the queue.
func (s *Spool) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Drain waits until Run has delivered (or dropped) every item, or ctx is
// done, and returns how many items are left.
func (s *Spool) Drain(ctx context.Context) int {
	for {
		s.mu.Lock()
		n, ch := len(s.items), s.changed
		s.mu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return n
		}
	}
}

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.cfg.Dir }

// Pending says whether an item with key waits in the queue.
func (s *Spool) Pending(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if it.Key == key {
			return true
		}
	}
	return false
}

// Stats returns the counts so far.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Queued, st.Bytes = len(s.items), s.bytes
	return st
}

// Run delivers until ctx is done, the oldest item first — of those not
// waiting out their own backoff: an item whose delivery failed waits
// alone, and the ones queued after it go on, in the order they were
// queued; once its wait is over it goes before them again. When
// deliveries of different items fail one after another the agent is
// failing them all, and the whole queue waits, with the same backoff,
// before the next try. It returns ctx's error, or ErrClosed once Close
// was called.
func (s *Spool) Run(ctx context.Context) error {
	var hold time.Time // the whole queue waits until then
	inARow := 0        // failed deliveries in a row, of any items
	var lastFailed *Item
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return ErrClosed
		}
		if !s.locked {
			var err error
			if s.locked, err = s.st.tryLock(); err != nil {
				s.log.Warn("upload queue lock", "spool", s.cfg.Dir, "err", err)
			}
		}
		now := s.cfg.now()
		var pick *Item
		var soonest time.Time
		if s.locked {
			s.applyBoundsLocked()
			pick, soonest = s.readyLocked(now, hold)
		}
		s.mu.Unlock()
		if pick == nil {
			wait := s.cfg.rescan
			if !soonest.IsZero() {
				wait = max(soonest.Sub(now), 0)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.wake:
			case <-s.cfg.after(wait):
				if soonest.IsZero() {
					if err := s.scan(); err != nil {
						s.log.Warn("upload queue scan", "err", err)
					}
				}
			}
			continue
		}
		err := s.cfg.Deliver(ctx, *pick)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil || !s.cfg.Retryable(err) || s.cfg.Unconfirmed(err) {
			inARow, lastFailed = 0, nil
		}
		switch {
		case err == nil:
			s.finish(pick, func(st *Stats) { st.Delivered++ })
		case s.cfg.Unconfirmed(err):
			s.log.Warn("upload sent but not answered in time: the agent may have it; it is not sent again", "key", pick.Key, "err", err)
			s.finish(pick, func(st *Stats) { st.Unconfirmed++ })
		case !s.cfg.Retryable(err):
			s.log.Error("upload refused; it will not be tried again", "key", pick.Key, "err", err)
			s.finish(pick, func(st *Stats) { st.Refused++ })
		case s.cfg.Unreached(err):
			// The agent is not there: not this item's doing. It keeps
			// its place; the queue waits.
			inARow++
			hold = now.Add(s.backoff(inARow))
			lastFailed = nil
			s.unreached(pick, hold.Sub(now), err)
		default:
			inARow++
			if lastFailed != nil && lastFailed != pick {
				hold = now.Add(s.backoff(inARow - 1)) // the agent fails every item
			}
			lastFailed = pick
			s.retryLater(pick, now, err)
		}
	}
}

// readyLocked picks the oldest item whose own wait is over (none before
// hold), and else says when the soonest will be.
func (s *Spool) readyLocked(now, hold time.Time) (pick *Item, soonest time.Time) {
	if len(s.items) == 0 {
		return nil, time.Time{}
	}
	for _, it := range s.items {
		at := it.next
		if hold.After(at) {
			at = hold
		}
		if !at.After(now) {
			return it, time.Time{}
		}
		if soonest.IsZero() || at.Before(soonest) {
			soonest = at
		}
	}
	return nil, soonest
}

// retryLater gives a failed item its own backoff.
func (s *Spool) retryLater(it *Item, now time.Time, err error) {
	s.mu.Lock()
	it.failures++
	wait := s.backoff(it.failures)
	it.next = now.Add(wait)
	s.stats.Retries++
	queued := len(s.items)
	failures := it.failures
	s.mu.Unlock()
	if failures == 1 || wait >= s.cfg.MaxBackoff/2 && failures%10 == 0 {
		s.log.Warn("upload failed; it stays queued and is tried again, the others go on meanwhile", "key", it.Key, "err", err,
			"retry_in", wait.Round(time.Millisecond), "queued", queued, "failures", failures)
	}
}

// unreached counts a try that could not reach the agent, and says so
// the first time in a row and then now and again.
func (s *Spool) unreached(it *Item, wait time.Duration, err error) {
	s.mu.Lock()
	s.stats.Retries++
	s.unreachedInARow++
	n, queued := s.unreachedInARow, len(s.items)
	s.mu.Unlock()
	if n == 1 || wait >= s.cfg.MaxBackoff/2 && n%10 == 0 {
		s.log.Warn("the agent cannot be reached; the uploads stay queued, in order, and are tried again", "key", it.Key, "err", err,
			"retry_in", wait.Round(time.Millisecond), "queued", queued, "tries", n)
	}
}

// finish removes a delivered or refused item.
func (s *Spool) finish(it *Item, count func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	count(&s.stats)
	s.unreachedInARow = 0
	for i, q := range s.items {
		if q == it {
			s.items = append(s.items[:i], s.items[i+1:]...)
			s.bytes -= it.Size
			break
		}
	}
	if err := s.st.remove(it.name); err != nil {
		s.log.Error("removing a finished upload from the queue; it may be sent again", "key", it.Key, "err", err)
	}
}

// backoff is the wait after the n-th failure in a row: MinBackoff·2ⁿ⁻¹,
// at most MaxBackoff, with its upper half random ("equal jitter").
func (s *Spool) backoff(n int) time.Duration {
	// Doubled step by step, not shifted: MinBackoff<<(n-1) overflowed to
	// a negative wait (and rand.N panicked) after some 35 failures in a
	// row — a few hours of an agent down.
	d := s.cfg.MinBackoff
	for i := 1; i < n && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.cfg.MaxBackoff)
	half := d / 2
	return half + rand.N(half+1)
}

// Close releases the directory. Items stay on disk for the next Open. A
// Run still going stops at its next step; an Add after Close returns
// ErrClosed.
func (s *Spool) Close() error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	return s.st.close()
}
