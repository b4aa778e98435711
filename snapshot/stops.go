package snapshot

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Our own stop resets what the kernel says of a blocked thread. A ptrace
// stop wakes a sleeping thread: it leaves its wait, enters the stop and,
// let go, waits again, and se.exec_start (like a sampler's switch records)
// then dates its time off the CPU from our stop: a second snapshot of a
// permanent deadlock said "off-CPU 692ms" where the first had said 3.35s.
//
// A stop costs a sleeping thread exactly two voluntary context switches:
// into the stop, and back into its wait (it may also be preempted on its
// way, which is our stop's doing too: it runs only because we woke it).
// Anything else it does — woken by what it waits for, it waits again or
// runs on — costs it more voluntary switches or leaves it running. A
// thread whose voluntary count moved by exactly two across our stop did
// nothing else, and a StopBook remembers it with its switch counts and
// since when it had been off the CPU; a later snapshot that finds the
// same counts knows it has stayed blocked since then, and says so. A
// thread with other counts is the kernel's to tell.

// StopBook remembers, across snapshots, since when the threads a snapshot
// stopped had been off the CPU (see above). A nil Options.Stops is the
// book of this stallwatch process; a command that snapshots once and
// exits keeps its book on disk (Export, Import).
type StopBook struct {
	mu    sync.Mutex
	procs map[bookKey]map[int]stopMark
}

// bookKey is one process: a pid, and its start time (clock ticks since
// boot), so that a pid used again is another process.
type bookKey struct {
	PID   int
	Start uint64
}

// stopMark is one thread left blocked by our stop: since when it had been
// off the CPU (CLOCK_MONOTONIC ns), and its switch counts once it was
// waiting again.
type stopMark struct {
	Since uint64 `json:"since"`
	Vol   uint64 `json:"voluntary"`
	Invol uint64 `json:"involuntary"`
}

// Bounds of a book: the processes it holds (the oldest entry is dropped)
// and the threads of each (a snapshot of more remembers none).
const (
	maxBookProcs   = 256
	maxBookThreads = 1 << 16
)

// NewStopBook returns an empty book.
func NewStopBook() *StopBook { return &StopBook{procs: map[bookKey]map[int]stopMark{}} }

// processStops is the book of this stallwatch process.
var processStops = NewStopBook()

// since is the mark of thread tid of process k when its switch counts are
// still those of the mark.
func (b *StopBook) since(k bookKey, tid int, vol, invol uint64) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.procs[k][tid]
	if !ok || m.Vol != vol || m.Invol != invol {
		return 0, false
	}
	return m.Since, true
}

// set replaces the marks of process k with a snapshot's.
func (b *StopBook) set(k bookKey, marks map[int]stopMark) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(marks) == 0 || len(marks) > maxBookThreads {
		delete(b.procs, k)
		return
	}
	if _, ok := b.procs[k]; !ok && len(b.procs) >= maxBookProcs {
		for old := range b.procs { // any one: the book is a cache
			delete(b.procs, old)
			break
		}
	}
	b.procs[k] = marks
}

// bookFile is the on-disk form of one process's marks.
type bookFile struct {
	PID     int              `json:"pid"`
	Start   uint64           `json:"start_ticks"`
	Threads map[int]stopMark `json:"threads"`
}

// Export writes the marks of process pid (as it runs now) as JSON; nil
// when there are none.
func (b *StopBook) Export(pid int) ([]byte, error) {
	k, err := keyOf(pid)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	marks := b.procs[k]
	b.mu.Unlock()
	if len(marks) == 0 {
		return nil, nil
	}
	return json.Marshal(bookFile{PID: k.PID, Start: k.Start, Threads: marks})
}

// Import adds marks Export wrote. It refuses what Export cannot have
// written (the file is stallwatch's own, in a directory only its user
// may write, but a file is read whole only within bounds).
func (b *StopBook) Import(data []byte) error {
	var f bookFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("snapshot: stop marks: %w", err)
	}
	if f.PID <= 0 || len(f.Threads) > maxBookThreads {
		return fmt.Errorf("snapshot: stop marks: pid %d with %d threads", f.PID, len(f.Threads))
	}
	for tid := range f.Threads {
		if tid <= 0 {
			return fmt.Errorf("snapshot: stop marks: thread %d", tid)
		}
	}
	b.set(bookKey{PID: f.PID, Start: f.Start}, f.Threads)
	return nil
}

func keyOf(pid int) (bookKey, error) {
	st, err := procfs.ReadStat(pid, pid)
	if err != nil {
		return bookKey{}, err
	}
	return bookKey{PID: pid, Start: st.StartTime}, nil
}

// stopped is a thread this snapshot stopped, as it was before the stop.
type stopped struct {
	tid        int
	since      uint64 // off the CPU since (CLOCK_MONOTONIC ns)
	vol, invol uint64
}

// stopCost is the voluntary switches a ptrace stop costs a sleeping
// thread: into the stop, and back into its wait.
const stopCost = 2

// settleWait bounds how long the marks wait for the threads stopped last
// to be waiting again.
const settleWait = 20 * time.Millisecond

// marks are the book's new marks for process pid: the threads stopped
// whose counts moved by a stop's alone, and those read without a stop
// whose time came from an earlier mark (carried).
func marksAfter(pid int, stops []stopped, carried map[int]stopMark) map[int]stopMark {
	marks := make(map[int]stopMark, len(stops)+len(carried))
	for tid, m := range carried {
		marks[tid] = m
	}
	deadline := time.Now().Add(settleWait)
	for _, s := range stops {
		for {
			st, err := procfs.ReadStatus(pid, s.tid)
			if err != nil {
				break
			}
			vol, invol := st.VoluntaryCtxtSwitches, st.NonvoluntaryCtxtSwitches
			if vol == s.vol+stopCost && st.State == 'S' {
				marks[s.tid] = stopMark{Since: s.since, Vol: vol, Invol: invol}
				break
			}
			// Let go, not yet waiting again: give it a moment.
			if vol < s.vol+stopCost && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			break
		}
	}
	return marks
}
