package jit

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// jitList is a process's GDB JIT interface as a JIT keeps it: the
// descriptor at desc, each entry at its own address naming its object at
// another, entries put first as they are registered and unlinked as they
// are freed. Memory reads see it as it is now.
type jitList struct {
	mu      sync.Mutex
	desc    uint64
	entries []jitListEntry // first (newest) first
	// Where each entry and object starts, by index in entries: made
	// again at a read after a change.
	byAt, bySymfile map[uint64]int
}

type jitListEntry struct {
	at, symfile uint64
	obj         []byte
}

func (l *jitList) register(at, symfile uint64, obj []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append([]jitListEntry{{at, symfile, obj}}, l.entries...)
	l.byAt = nil
}

func (l *jitList) unregister(at uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range l.entries {
		if e.at == at {
			l.entries = append(l.entries[:i:i], l.entries[i+1:]...)
			l.byAt = nil
			return
		}
	}
}

// ReadAt serves the descriptor, the entries and the objects, as they are
// laid out now.
func (l *jitList) ReadAt(p []byte, addr uint64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var region []byte
	var base uint64
	switch {
	case addr >= l.desc && addr < l.desc+24:
		d := make([]byte, 24)
		binary.LittleEndian.PutUint32(d, gdbVersion)
		if len(l.entries) > 0 {
			binary.LittleEndian.PutUint64(d[16:], l.entries[0].at)
		}
		region, base = d, l.desc
	default:
		if l.byAt == nil {
			l.byAt, l.bySymfile = map[uint64]int{}, map[uint64]int{}
			for i, e := range l.entries {
				l.byAt[e.at], l.bySymfile[e.symfile] = i, i
			}
		}
		// The tests read entries and objects from their starts.
		if i, ok := l.byAt[addr]; ok {
			b := make([]byte, 32)
			if i+1 < len(l.entries) {
				binary.LittleEndian.PutUint64(b, l.entries[i+1].at)
			}
			if i > 0 {
				binary.LittleEndian.PutUint64(b[8:], l.entries[i-1].at)
			}
			binary.LittleEndian.PutUint64(b[16:], l.entries[i].symfile)
			binary.LittleEndian.PutUint64(b[24:], uint64(len(l.entries[i].obj)))
			region, base = b, addr
		}
		if i, ok := l.bySymfile[addr]; ok {
			region, base = l.entries[i].obj, addr
		}
	}
	if region == nil {
		return 0, errors.New("unmapped")
	}
	n := copy(p, region[addr-base:])
	if n < len(p) {
		return n, errors.New("short")
	}
	return n, nil
}

// jitObjectAt is a relocatable object gcc made, its .text placed at addr
// as a JIT's loader places it (the section header's address patched), so
// that its function "jitted" lies at addr.
func jitObjectAt(t *testing.T, addr uint64) []byte {
	t.Helper()
	gcc := testutil.RequireTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "f.c")
	if err := os.WriteFile(src, []byte("int jitted(int x) { return x * 3 + 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(dir, "f.o")
	if out, err := exec.Command(gcc, "-O1", "-c", "-o", obj, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	for i, s := range ef.Sections {
		if s.Name == ".text" {
			binary.LittleEndian.PutUint64(b[shoff+uint64(i)*64+16:], addr) // sh_addr
			return b
		}
	}
	t.Fatal("no .text in gcc's object")
	return nil
}

// TestGDBJITLoadTimes: code the interface registered is found by the
// samples taken in it before the look that found it (back to the look
// before, which would have found it), except where it lies over code the
// same read found freed, where the old code answers until that read;
// between reads of the whole list, the list's head is looked at for a
// sample newer than the last look, and what it finds is read; a freed
// object is not marked freed where live code registered since covers it.
func TestGDBJITLoadTimes(t *testing.T) {
	const (
		a, b, c = 0x7f0000100000, 0x7f0000200000, 0x7f0000300000
		ms      = uint64(time.Millisecond)
		gap     = 20 * ms // between whole reads, as the unwinder asks
	)
	list := &jitList{desc: 0x600000}
	list.register(0x610000, 0x620000, jitObjectAt(t, a))
	p := &Process{b: &builder{}, refused: map[string]*SourceInfo{}, looked: map[string]bool{}}
	p.WatchGDBJIT(list, list.desc)
	now := 1000 * ms
	p.gdb.now = func() uint64 { return now }
	p.gdb.follow = 0 // the looks are the test's alone
	// look is what the unwinder asks for a sample at t, now.
	look := func(t uint64) (changed bool, whole bool) {
		reads := p.gdb.reads
		changed = p.ReadGDBJIT(t, gap)
		return changed, p.gdb.reads > reads
	}
	type lookup struct {
		what   string
		addr   uint64
		t      uint64
		loaded uint64
		found  bool
	}
	var want []lookup

	// The first read: A was there before stallwatch looked.
	if changed, whole := look(now); !changed || !whole {
		t.Fatalf("the first look: changed %v, whole read %v", changed, whole)
	}
	first := now

	// B registered where nothing was: found by the next look, a whole
	// read once the gap has passed.
	now += 5 * ms
	list.register(0x630000, 0x640000, jitObjectAt(t, b))
	sampleB := now + ms
	now += gap + 10*ms
	if changed, whole := look(sampleB); !changed || !whole {
		t.Fatalf("the look after B's registration: changed %v, whole read %v", changed, whole)
	}
	second := now
	want = append(want,
		lookup{"A, from before the first read", a, 1, 0, true},
		lookup{"B at the read before the one that found it", b, first, 0, false},
		lookup{"B's sample, before the read that found it", b, sampleB, first + 1, true},
		lookup{"B after its read", b, second + 1, first + 1, true})

	// A freed, and the same code loaded where A was: told apart only at
	// the whole read that finds both.
	now += 7 * ms
	list.unregister(0x610000)
	list.register(0x650000, 0x660000, jitObjectAt(t, a))
	now += gap
	look(now)
	third := now
	want = append(want,
		lookup{"A until the read that found it freed, under its successor", a, third - 1, 0, true},
		lookup{"A's successor from the read that found it over A", a, third, third, true})

	// Within the gap: a sample newer than the last look has the list's
	// head read; a look within gdbHeadGap of the last is not made; one
	// after it, with nothing new, changes nothing.
	now += 2 * ms
	list.register(0x670000, 0x680000, jitObjectAt(t, c))
	if changed, whole := look(now - ms/2); !changed || whole {
		t.Errorf("a sample newer than the last look, an object not read at the head: changed %v, whole read %v", changed, whole)
	}
	fourth := now
	want = append(want, lookup{"C, found at the head within the gap", c, fourth - ms/2, third + 1, true})
	now += ms / 2
	list.unregister(0x670000)
	list.register(0x690000, 0x6a0000, jitObjectAt(t, c))
	if changed, _ := look(now - ms/10); changed {
		t.Errorf("a look %d ns after the last: the index changed", ms/2)
	}
	// A sample in code the index does not have asks for the head
	// however soon after the last look.
	if !p.ReadGDBJITHead(now - ms/10) {
		t.Errorf("a sample in code not in the index, %d ns after the last look: C' not read", ms/2)
	}
	fifth := now
	now += ms
	if changed, whole := look(now - ms/10); changed || whole {
		t.Errorf("nothing new at the head: changed %v, whole read %v", changed, whole)
	}
	// The whole read finds C gone: C' covers its code, and answers.
	now += gap
	look(now)
	want = append(want,
		lookup{"C', found at the head over C", c, fifth - ms/10, fourth + 1, true},
		lookup{"C' after the whole read found C gone", c, now + ms, fourth + 1, true})

	ix := p.Index()
	for _, tc := range want {
		s, ok := ix.LookupAt(tc.addr, tc.t)
		if ok != tc.found || ok && s.Loaded != tc.loaded {
			var loaded uint64
			if ok {
				loaded = s.Loaded
			}
			t.Errorf("%s: lookup of %#x at %d: found %v loaded at %d, want found %v loaded at %d", tc.what, tc.addr, tc.t, ok, loaded, tc.found, tc.loaded)
		}
	}
}

// TestGDBJITLongList: a list of thousands of objects (a Julia that has
// compiled for a while) is read whole about once a second, not at every
// gap; its head is looked at in between.
func TestGDBJITLongList(t *testing.T) {
	const ms = uint64(time.Millisecond)
	list := &jitList{desc: 0x600000}
	for i := range uint64(5000) {
		// Entries whose objects are not there to read: counted, read once.
		list.register(0x1000000+i*32, 0x9000000+i*64, make([]byte, 16))
	}
	p := &Process{b: &builder{}, refused: map[string]*SourceInfo{}, looked: map[string]bool{}}
	p.WatchGDBJIT(list, list.desc)
	now := 1000 * ms
	p.gdb.now = func() uint64 { return now }
	p.gdb.follow = 0
	p.ReadGDBJIT(now, 20*ms)
	whole := 0
	for range 2000 { // two seconds of samples, one a millisecond
		now += ms
		reads := p.gdb.reads
		p.ReadGDBJIT(now-ms/2, 20*ms)
		if p.gdb.reads > reads {
			whole++
		}
	}
	if whole < 1 || whole > 2 {
		t.Errorf("5000 entries: %d whole reads in 2 s, want 1 or 2 (one per %d ms)", whole, 5000*gdbEntryGap/ms)
	}
}

// TestGDBJITFollow: while the unwinder asks, the list is looked at on a
// clock of its own: an object registered and freed while no walk asks
// (a reader fallen behind) is read all the same; the looking stops when
// the asking does, and at Close.
func TestGDBJITFollow(t *testing.T) {
	const at = 0x7f0000400000
	obj := jitObjectAt(t, at)
	list := &jitList{desc: 0x600000}
	p := &Process{b: &builder{}, refused: map[string]*SourceInfo{}, looked: map[string]bool{}}
	p.WatchGDBJIT(list, list.desc)
	p.mu.Lock()
	p.gdb.followIdle = 300 * time.Millisecond
	p.mu.Unlock()
	p.ReadGDBJIT(1, uint64(20*time.Millisecond))

	list.register(0x610000, 0x620000, obj)
	registered := uint64(0)
	waitFor(t, "the object registered while no walk asked to be read", func() bool {
		s, ok := p.Index().LookupAt(at, math.MaxUint64)
		if ok {
			registered = s.Loaded
		}
		return ok
	})
	list.unregister(0x610000)
	waitFor(t, "the object freed while no walk asked to be marked freed", func() bool {
		_, ok := p.Index().LookupAt(at, math.MaxUint64)
		return !ok
	})
	if _, ok := p.Index().LookupAt(at, registered); !ok {
		t.Errorf("the object is not found at its load time %d", registered)
	}
	following := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.gdb.following
	}
	waitFor(t, "the looking to stop once the asking stopped", func() bool { return !following() })

	p.ReadGDBJIT(math.MaxUint64, uint64(20*time.Millisecond))
	if !following() {
		t.Fatal("asking again: no looking")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the looking to stop at Close", func() bool { return !following() })
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
