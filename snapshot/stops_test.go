package snapshot

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestOffCPUAcrossOurStops: a second snapshot of a permanent deadlock
// says how long its threads have really been blocked, although the first
// snapshot's stop woke each of them and the kernel dates their time off
// the CPU from it (3.35 s became 692 ms). A thread that did anything but
// our stop in between is the kernel's to tell. (Threads asleep in a
// system call are read without a stop where they can be: these are
// stopped, as those that cannot be are.)
func TestOffCPUAcrossOurStops(t *testing.T) {
	t.Parallel()
	tg, ids := deadlockTarget(t)
	// Spans to measure, not synchronization: blocked a while before the
	// first snapshot, and a while between the two.
	const before, between = 600 * time.Millisecond, 300 * time.Millisecond
	time.Sleep(before)
	book := NewStopBook()
	first := take(t, tg.Pid, Options{Stops: book, stopSleepers: true})
	time.Sleep(between)
	second := take(t, tg.Pid, Options{Stops: book, stopSleepers: true})
	carried := 0
	for _, k := range []string{"a", "b", "waiter"} {
		t1, t2 := threadOf(t, first, ids[k]), threadOf(t, second, ids[k])
		if !t1.Stopped || !t1.OffCPUKnown {
			t.Fatalf("thread %s: stopped %v, off-CPU known %v in the first snapshot; want both", k, t1.Stopped, t1.OffCPUKnown)
		}
		if t1.OffCPUFor < before {
			t.Errorf("thread %s: off the CPU for %v at the first snapshot, blocked at least %v", k, t1.OffCPUFor, before)
		}
		if t2.VoluntarySwitches != t1.VoluntarySwitches+stopCost {
			t.Logf("thread %s did more than our stop between the snapshots (switches %d/%d → %d/%d): its time is the kernel's",
				k, t1.VoluntarySwitches, t1.InvoluntarySwitches, t2.VoluntarySwitches, t2.InvoluntarySwitches)
			continue
		}
		carried++
		if t2.OffCPUFor < t1.OffCPUFor+between-10*time.Millisecond {
			t.Errorf("thread %s: off the CPU %v at the first snapshot, %v at the second %v later: our stop reset it", k, t1.OffCPUFor, t2.OffCPUFor, between)
		}
		if !strings.Contains(t2.OffCPUSource, "earlier stallwatch stop") {
			t.Errorf("thread %s: source %q does not say the time runs from before our earlier stop", k, t2.OffCPUSource)
		}
	}
	if carried == 0 {
		t.Fatal("every deadlocked thread did more than our stop between two snapshots")
	}
	// Without the book, the kernel's accounting after our stop.
	fresh := take(t, tg.Pid, Options{Stops: NewStopBook(), stopSleepers: true})
	if a2, a3 := threadOf(t, second, ids["a"]), threadOf(t, fresh, ids["a"]); a3.OffCPUKnown && a3.OffCPUFor >= a2.OffCPUFor {
		t.Logf("the kernel kept thread a's time across our stop (%v, then %v): this kernel does not reset it", a2.OffCPUFor, a3.OffCPUFor)
	}
}

func TestStopBookImport(t *testing.T) {
	for _, bad := range []string{``, `{`, `{"pid":0,"threads":{}}`, `{"pid":5,"threads":{"-1":{"since":1}}}`, `[]`} {
		if err := NewStopBook().Import([]byte(bad)); err == nil {
			t.Errorf("Import(%q) took it", bad)
		}
	}
	b := NewStopBook()
	if err := b.Import([]byte(`{"pid":5,"start_ticks":7,"threads":{"6":{"since":100,"voluntary":4,"involuntary":1}}}`)); err != nil {
		t.Fatal(err)
	}
	if s, ok := b.since(bookKey{5, 7}, 6, 4, 1); !ok || s != 100 {
		t.Errorf("since = %d, %v; want 100, true", s, ok)
	}
	if _, ok := b.since(bookKey{5, 8}, 6, 4, 1); ok {
		t.Error("a mark of another process with the same pid was used")
	}
	if _, ok := b.since(bookKey{5, 7}, 6, 5, 1); ok {
		t.Error("a mark was used although the thread switched since")
	}
}

// FuzzStopBookImport: a marks file is read within bounds; what is taken
// holds a positive pid and thread ids, each mark found again as written.
func FuzzStopBookImport(f *testing.F) {
	f.Add([]byte(`{"pid":5,"start_ticks":7,"threads":{"6":{"since":100,"voluntary":4,"involuntary":1}}}`))
	f.Add([]byte(`{"pid":5,"threads":{"0":{}}}`))
	f.Add([]byte(`{"pid":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b := NewStopBook()
		if err := b.Import(data); err != nil {
			return
		}
		var bf bookFile
		if err := json.Unmarshal(data, &bf); err != nil {
			t.Fatalf("Import took what does not decode: %v", err)
		}
		for tid, m := range bf.Threads {
			if tid <= 0 {
				t.Fatalf("thread %d taken", tid)
			}
			if s, ok := b.since(bookKey{bf.PID, bf.Start}, tid, m.Vol, m.Invol); !ok || s != m.Since {
				t.Fatalf("thread %d: since %d, %v; want %d", tid, s, ok, m.Since)
			}
		}
	})
}
