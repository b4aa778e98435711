package hotspot

import (
	"encoding/binary"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestImage: the recorded images read as their live JVMs did, without a
// JVM: every application thread, its frames, and the deadlock.
func TestImage(t *testing.T) {
	for _, c := range []struct {
		file    string
		threads []string
		kind    LockKind
		top     string // the first deadlocked thread's top frame
	}{
		{"jdk17-deadlock.img.gz", []string{"transfer-1", "transfer-2"}, MonitorLock, "Ledger.settleSavingsFrom"},
		{"jdk17-lockdeadlock.img.gz", []string{"mover-gold", "mover-silver"}, OwnableLock, "jdk.internal.misc.Unsafe.park"},
	} {
		t.Run(c.file, func(t *testing.T) {
			im := loadImage(t, c.file)
			j, _, err := readImage(im, im, Limits{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(j.Problems) > 0 {
				t.Errorf("problems: %q", j.Problems)
			}
			if len(j.Deadlocks) != 1 {
				t.Fatalf("deadlocks %q", deadlocksText(j))
			}
			var names []string
			for _, l := range j.Deadlocks[0].Links {
				names = append(names, l.Name)
				if l.Lock.Kind != c.kind || l.Lock.HolderTID == 0 || l.TID == 0 {
					t.Errorf("link %+v", l)
				}
			}
			if !slices.Equal(names, c.threads) {
				t.Errorf("deadlocked %q, want %q", names, c.threads)
			}
			first := j.Thread(j.Deadlocks[0].Links[0].TID)
			if first == nil || len(first.Frames) < 3 || first.Frames[0].Method.String() != c.top {
				t.Errorf("frames of %q:\n%s", c.threads[0], stackText(first.Frames))
			}
			for _, th := range j.Threads {
				if th.Cut != "" {
					t.Errorf("%q's frames end early: %s", th.Name, th.Cut)
				}
			}
		})
	}
}

// fuzzImage is the image a fuzz run corrupts, and its words worth
// corrupting: those a clean reading used that are not zero (pointers,
// lengths, offsets).
var fuzzImage struct {
	once  sync.Once
	im    *image
	words []uint64
}

func loadFuzzImage(t testing.TB) (*image, []uint64) {
	fuzzImage.once.Do(func() {
		im := loadImage(t, "jdk17-deadlock.img.gz")
		for base, pg := range im.pages {
			for off := 0; off+8 <= len(pg); off += 8 {
				if binary.LittleEndian.Uint64(pg[off:]) != 0 {
					fuzzImage.words = append(fuzzImage.words, base+uint64(off))
				}
			}
		}
		slices.Sort(fuzzImage.words)
		fuzzImage.im = im
	})
	return fuzzImage.im, fuzzImage.words
}

// corrupt applies the operations in ops to a copy of im: each 13 bytes,
// an operation, a word index and a value. Writing garbage, pointing a
// word at another (cycles, one structure read as another), small
// integers (lengths, counts, offsets), and removing a page (a structure
// cut short).
func corrupt(im *image, words []uint64, ops []byte) *image {
	out := &image{syms: im.syms, pages: maps.Clone(im.pages)}
	own := map[uint64]bool{}
	write := func(at, v uint64) {
		base := at &^ (pageSize - 1)
		pg, ok := out.pages[base]
		if !ok || int(at-base)+8 > len(pg) {
			return
		}
		if !own[base] {
			pg = slices.Clone(pg)
			out.pages[base], own[base] = pg, true
		}
		binary.LittleEndian.PutUint64(pg[at-base:], v)
	}
	for len(ops) >= 13 && len(words) > 0 {
		op, idx, v := ops[0], binary.LittleEndian.Uint32(ops[1:]), binary.LittleEndian.Uint64(ops[5:])
		ops = ops[13:]
		at := words[int(idx)%len(words)]
		switch op % 5 {
		case 0:
			write(at, v)
		case 1:
			write(at, words[int(v%uint64(len(words)))]) // a pointer into the image
		case 2:
			write(at, v&0xffff)
		case 3:
			write(at, at) // a pointer to itself
		case 4:
			delete(out.pages, at&^(pageSize-1))
		}
	}
	return out
}

// fuzzLimits keep a fuzz run quick; the clean image reads within them.
var fuzzLimits = Limits{Bytes: 8 << 20, Pages: 1024, Reads: 2 << 20}

// FuzzMemory corrupts a real JVM's memory and reads it: never a panic,
// never more than the limits allow, never an allocation beyond a bound
// that no size read from the target can raise.
func FuzzMemory(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 7, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2, 200, 1, 0, 0, 255, 255, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		im, words := loadFuzzImage(t)
		bad := corrupt(im, words, ops)
		var j *Java
		var r *Reader
		heap := testutil.HeapBytes(func() { j, r, _ = readImage(bad, bad, fuzzLimits, nil) })
		if r.Spent() > fuzzLimits.Bytes || r.Reads() > fuzzLimits.Reads+1 {
			t.Fatalf("read %d bytes in %d reads, past the limits %+v", r.Spent(), r.Reads(), fuzzLimits)
		}
		// Pages cached, plus what a reading keeps: threads, frames and
		// names are bounded by the reads that found them.
		if bound := uint64(fuzzLimits.Pages*pageSize) + 64<<20; heap > bound {
			t.Fatalf("reading allocated %d bytes (bound %d)", heap, bound)
		}
		if j != nil {
			checkJava(t, j)
		}
	})
}

// checkJava checks what holds of any reading.
func checkJava(t *testing.T, j *Java) {
	t.Helper()
	if len(j.Problems) > maxProblems+1 {
		t.Fatalf("%d problems kept", len(j.Problems))
	}
	if len(j.Threads) > maxThreads {
		t.Fatalf("%d threads", len(j.Threads))
	}
	for _, th := range j.Threads {
		if len(th.Frames) > maxFrames {
			t.Fatalf("%d frames", len(th.Frames))
		}
		for _, f := range th.Frames {
			if f.Method == nil || len(f.Locks) > maxFrameMonitors+1 {
				t.Fatalf("frame %+v", f)
			}
		}
	}
	for _, d := range j.Deadlocks {
		if len(d.Links) == 0 {
			t.Fatal("an empty deadlock")
		}
	}
}

// FuzzThreadDump: any text read as a thread dump gives a bounded result,
// without a panic, and allocations in proportion to the text.
func FuzzThreadDump(f *testing.F) {
	for _, s := range []string{
		"",
		"\"a\" #1 prio=5 os_prio=0 tid=0x1 nid=0x2 runnable\n   java.lang.Thread.State: RUNNABLE\n\tat A.b(A.java:1)\n\t- locked <0x10> (a X)\n",
		"Found one Java-level deadlock:\n=====\n\"a\":\n  waiting to lock monitor 0x1 (object 0x2, a X),\n  which is held by \"b\"\n",
		"\"x\"y\" #2 daemon prio=5 os_prio=0 tid=0x1 nid=77 waiting on condition\n\tat P.q(Native Method)\n\t- parking to wait for  <0x9> (a Y)\n   Locked ownable synchronizers:\n\t- <0x9> (a Y)\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var j *Java
		heap := testutil.HeapBytes(func() { j = ParseThreadDump(b) })
		if bound := uint64(len(b))*64 + 1<<20; heap > bound {
			t.Fatalf("%d bytes of dump allocated %d (bound %d)", len(b), heap, bound)
		}
		checkJava(t, j)
		names := map[string]bool{}
		for _, th := range j.Threads {
			names[th.Name] = true
			if th.TID < 0 {
				t.Fatalf("tid %d", th.TID)
			}
			if strings.ContainsRune(th.Name, '\n') {
				t.Fatalf("name %q across lines", th.Name)
			}
		}
	})
}
