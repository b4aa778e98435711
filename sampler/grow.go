package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/unwind"
)

// A thread's stack copies grow (Config.GrowStackCopy) when its walks run
// out of them: a walk that ends CopyExhausted with the copy as large as
// asked would have gone further with a larger one. A copy the kernel cut
// short (a page not resident, the stack's end: Cut.Short) says nothing
// of the size, and does not count.
//
// The threshold is growAfter such walks that are at least 1 in
// growShare of the thread's recent ones (counts halved every copyWindow
// walks, so that a thread's last few thousand samples decide, not its
// whole life): a thread whose stacks are all deeper grows after its
// second sample, one whose deep stacks are rarer than 1% of its samples
// keeps the smaller copy, at least 99% of its stacks whole.
//
// Copies never shrink: what made a thread's stacks deep (a recursive
// parser, an interpreter's frames, a deep request path) comes back, and
// each regrowth costs the samples of the walks that ran out before it;
// the ring memory of a grown thread is bounded by the ceiling (two of its
// largest records at least, RingHold at the peak rate within its share
// of the budget at most).
//
// A thread's first samples decide soonest: for settleFor after a thread
// is attached the reader drains the rings every settleTick, not only when
// a quarter of a ring is full (a thread deeper than its copy would
// otherwise lose hundreds of stacks, at 997 Hz, before the first drain).
const (
	settleFor  = time.Second
	settleTick = 20 * time.Millisecond
	growAfter  = 2
	growShare  = 100
	copyWindow = 1024
)

// copyUse is how a thread's stack copies served its walks.
type copyUse struct {
	walked, exhausted int
	want              bool  // the copies should grow at the next drain
	grown             int   // how many times they grew
	err               error // why they could not grow (not tried again)
}

// note counts one walk that ended with cut, and says whether the copies
// should grow.
func (u *copyUse) note(cut unwind.Cut) bool {
	u.walked++
	if cut.Reason == unwind.CopyExhausted && !cut.Short() {
		u.exhausted++
	}
	if u.walked >= copyWindow {
		u.walked, u.exhausted = u.walked/2, u.exhausted/2
	}
	return u.exhausted >= growAfter && u.exhausted*growShare >= u.walked
}

// noteCopy counts the walk of a sample of t that asked for a copy of
// asked bytes, and marks t to grow where it should and can. A sample of
// the events a regrowth replaced (a smaller copy than the event's now)
// says nothing of the new size.
func (s *Sampler) noteCopy(t *thread, id uint64, asked int, cut unwind.Cut) {
	if s.growTo == 0 || t.copies.want || t.copies.err != nil || t.copySize() >= s.growTo {
		return
	}
	if id == t.onID && asked < t.dumpOn || id == t.offID && asked < t.dumpOff {
		return
	}
	if t.copies.note(cut) {
		t.copies.want = true
	}
}

// grownSize is a copy of v bytes doubled, within the ceiling (0 stays 0:
// an event that copies nothing).
func (s *Sampler) grownSize(v int) int {
	if v == 0 {
		return 0
	}
	return min(2*v, s.growTo)
}

// errRingTooSmall says a fixed Config.RingBytes cannot hold two records of
// the larger copy.
var errRingTooSmall = errors.New("the ring (Config.RingBytes) cannot hold two records of the larger copy")

// grow reopens t's sampling events with stack copies twice as large (up
// to Config.GrowStackCopy), on a new ring, without a gap: the new events
// are enabled before the old ones are disabled, and a cut-over time
// splits the overlap between them (records of the old ring at or after
// it, and of the new ring before it, are the same moments seen twice, and
// dropped). The old ring is read to its end before its events are
// released. Called with s.mu held, from drain, with t live.
func (s *Sampler) grow(t *thread) {
	t.copies.want = false
	n := &thread{tid: t.tid, tracker: -1, on: -1, off: -1,
		dumpOn: s.grownSize(t.dumpOn), dumpOff: s.grownSize(t.dumpOff)}
	if err := s.openGrown(t, n); err != nil {
		s.closeThread(n)
		t.copies.err = err
		s.stats.StackCopyGrowFailed++
		s.log.Warn("a thread's stack copies could not grow; its deeper stacks stay cut", "tid", t.tid, "bytes", n.copySize(), "err", err)
		return
	}
	cut := monotime.Now()
	if t.onEnabled {
		_ = disable(t.on)
	}
	if t.offEnabled {
		_ = disable(t.off)
	}
	// The old ring's last records: the kernel writes none after DISABLE
	// returns (it waits for the event to leave the CPU it runs on).
	t.until, t.next = cut, [2]uint64{n.onID, n.offID}
	var exit uint64
	if t.ring != nil {
		t.ring.read(func(b []byte) {
			if when, ok := s.handle(t, b); ok {
				exit = when
			}
		})
		s.stats.BadRecords += t.ring.corrupt
	}
	t.until, t.next = 0, [2]uint64{}
	s.epollDel(t.on) // before its ring is unmapped: see epollDel
	old := closeJob{mems: [][]byte{t.mem}, fds: []int{t.on}}
	s.ringTotal -= len(t.mem) - s.pageSize
	if t.off >= 0 {
		old.fds = append(old.fds, t.off)
	}
	t.on, t.off, t.onID, t.offID = n.on, n.off, n.onID, n.offID
	t.onLayout, t.offLayout = n.onLayout, n.offLayout
	t.onEnabled, t.offEnabled = n.onEnabled, n.offEnabled
	t.mem, t.ring = n.mem, n.ring
	t.dumpOn, t.dumpOff = n.dumpOn, n.dumpOff
	t.from = cut
	t.copies.walked, t.copies.exhausted, t.copies.want = 0, 0, false
	t.copies.grown++
	s.stats.StackCopyGrowths++
	s.closer <- old
	s.log.Debug("stack copies grew", "tid", t.tid, "bytes", t.copySize())
	if exit != 0 {
		s.release(t, exit)
	}
}

// openGrown opens n's events beside t's, enabled as t's are: the on-CPU
// event with its ring, and the off-CPU event writing there if t has one.
func (s *Sampler) openGrown(t, n *thread) error {
	rec := s.recordFor(n.copySize())
	if s.cfg.RingBytes != 0 && s.pow2Pages(s.cfg.RingBytes) < 2*rec {
		return errRingTooSmall
	}
	size := s.ringBytes(n.copySize(), len(t.mem)-s.pageSize)
	err := s.openOnCPUSized(n, size)
	if errors.Is(err, unix.EPERM) && n.mem == nil && size > s.pow2Pages(2*rec) {
		// Locked memory short: the smallest ring that holds the records.
		unix.Close(n.on) // not yet in epoll, never enabled
		n.on = -1
		err = s.openOnCPUSized(n, s.pow2Pages(2*rec))
	}
	if err != nil {
		return err
	}
	if t.off >= 0 {
		if err := s.openOffCPU(n); err != nil {
			return err
		}
	}
	if t.onEnabled {
		if err := s.startOnCPU(n); err != nil {
			return err
		}
	}
	if t.offEnabled {
		if err := enable(n.off); err != nil {
			return fmt.Errorf("PERF_EVENT_IOC_ENABLE on thread %d: %w", n.tid, err)
		}
		n.offEnabled = true
	}
	return nil
}

// replacing reports whether record b, which did not decode, is a sample
// of the events that replace t's (grow) found in the old ring: the kernel
// has been seen to put the new context-switch event's samples of the
// overlap there (1–4 in a run of TestStackCopyGrows), moments the old
// event recorded too. They are dropped, not counted as bad records.
func (t *thread) replacing(b []byte) bool {
	if t.until == 0 || len(b) < headerSize+8 || binary.LittleEndian.Uint32(b) != recSample {
		return false
	}
	id := binary.LittleEndian.Uint64(b[headerSize:])
	return id != 0 && (id == t.next[0] || id == t.next[1])
}

// seenTwice reports whether a record of t at time at falls in the part of
// a regrowth's overlap that the other ring keeps (grow).
func (t *thread) seenTwice(at uint64) bool {
	return at < t.from || t.until != 0 && at >= t.until
}
