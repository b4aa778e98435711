package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// An address reused by later code: each query names the code that was
// live at its time.
func TestLookupAtReusedAddress(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	w.load(100, 0x1000, 0x100, 1, "JS:*a /a.js:1:1") // [0x1000, 0x1100)
	w.load(200, 0x1080, 0x100, 2, "JS:*b /b.js:1:1") // [0x1080, 0x1180) over a's tail
	w.load(300, 0x1000, 0x40, 3, "JS:*c /c.js:1:1")  // [0x1000, 0x1040) over a's head
	ix, _ := readBytes(t, "jit-1.dump", w.bytes())
	for _, c := range []struct {
		addr, t uint64
		want    string
	}{
		{0x1010, 50, ""}, // before any code
		{0x1010, 100, "a"},
		{0x1010, 250, "a"},
		{0x1010, 300, "c"},
		{0x1050, 350, "a"}, // a's middle: nothing replaced it
		{0x1090, 150, "a"},
		{0x1090, 200, "b"},
		{0x1090, 1 << 60, "b"},
		{0x1170, 150, ""}, // b's range before b
		{0x1170, 250, "b"},
		{0x1180, 250, ""}, // one past b
		{0x0fff, 250, ""},
	} {
		s, ok := ix.LookupAt(c.addr, c.t)
		got := ""
		if ok {
			got = s.Display
		}
		if got != c.want {
			t.Errorf("LookupAt(%#x, %d) = %q, want %q", c.addr, c.t, got, c.want)
		}
	}
	for addr, want := range map[uint64]string{0x1000: "c", 0x1040: "a", 0x107f: "a", 0x1080: "b", 0x117f: "b"} {
		if s, ok := ix.Lookup(addr); !ok || s.Display != want {
			t.Errorf("Lookup(%#x) = %v, want %s", addr, s, want)
		}
	}
}

func TestLookupAtMovedFunction(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	w.load(100, 0x1000, 0x100, 7, "JS:*hot /app.js:3:1")
	w.move(200, 0x1000, 0x5000, 0x100, 7)
	w.load(300, 0x1000, 0x20, 8, "JS:*later /app.js:9:1")
	ix, info := readBytes(t, "jit-1.dump", w.bytes())
	if info.Symbols != 3 {
		t.Errorf("Symbols = %d, want 3 (load, moved copy, later load)", info.Symbols)
	}
	for _, c := range []struct {
		addr, t uint64
		want    string
	}{
		{0x1010, 150, "hot"},
		{0x1010, 250, ""}, // moved away
		{0x1050, 350, ""}, // still vacated: later covers only 0x20
		{0x1010, 350, "later"},
		{0x5010, 150, ""}, // not there yet
		{0x5010, 200, "hot"},
		{0x5010, math.MaxUint64, "hot"},
	} {
		s, ok := ix.LookupAt(c.addr, c.t)
		got := ""
		if ok {
			got = s.Display
			if got == "hot" && c.addr >= 0x5000 && (s.Start != 0x5000 || s.Loaded != 200 || s.CodeIndex != 7) {
				t.Errorf("moved symbol = %+v", s)
			}
		}
		if got != c.want {
			t.Errorf("LookupAt(%#x, %d) = %q, want %q", c.addr, c.t, got, c.want)
		}
	}
}

// Jitdumps answer before perf maps; a perf map answers where the jitdump
// knows nothing, and its later lines win.
func TestLookupLayers(t *testing.T) {
	var b builder
	add := func(layer int, start, size, loaded uint64, name string) {
		b.add(layer, Symbol{Start: start, Size: size, Name: name, Display: name, Loaded: loaded}, false)
	}
	add(layerPerfMap, 0x1000, 0x100, 0, "map-old")
	add(layerJitdump, 0x1000, 0x80, 500, "dump")
	add(layerPerfMap, 0x1000, 0x100, 0, "map-new")
	ix := b.index()
	for _, c := range []struct {
		addr, t uint64
		want    string
	}{
		{0x1010, 600, "dump"},
		{0x1010, 400, "map-new"}, // the jitdump had nothing there yet
		{0x10f0, 600, "map-new"},
		{0x2000, 600, ""},
	} {
		s, ok := ix.LookupAt(c.addr, c.t)
		got := ""
		if ok {
			got = s.Name
		}
		if got != c.want {
			t.Errorf("LookupAt(%#x, %d) = %q, want %q", c.addr, c.t, got, c.want)
		}
	}
}

// Across layers the code loaded last before t answers: a JIT that lists
// its code with the GDB interface and writes a jitdump too (LLVM's, as
// lli and Julia do) replaces code at an address; the interface frees the
// old object only when its list is read again, after the jitdump has the
// new code (TestContinuousJITReplaced found it with lli).
func TestLookupLayersLatestWins(t *testing.T) {
	var b builder
	add := func(layer int, start, size, loaded uint64, name string, tomb bool) {
		b.add(layer, Symbol{Start: start, Size: size, Name: name, Display: name, Loaded: loaded}, tomb)
	}
	add(layerJitdump, 0x1000, 0x80, 100, "old", false)
	add(layerGDB, 0x1000, 0x80, 150, "old (gdb)", false) // first seen at a read after its load
	add(layerJitdump, 0x1000, 0x80, 300, "new", false)
	add(layerGDB, 0x1000, 0x80, 400, "", true) // the next read: the old object is gone
	add(layerGDB, 0x1000, 0x80, 400, "new (gdb)", false)
	ix := b.index()
	for _, c := range []struct {
		t    uint64
		want string
	}{
		{120, "old"},       // before the interface's read
		{200, "old (gdb)"}, // the interface's object is where the code is
		{350, "new"},       // the jitdump's new code, the interface's old object not yet freed
		{450, "new (gdb)"},
	} {
		s, sp, ok := ix.LookupSpan(0x1010, c.t)
		got := ""
		if ok {
			got = s.Name
		}
		if got != c.want || !sp.Contains(c.t) {
			t.Errorf("LookupSpan(0x1010, %d) = %q over %+v, want %q", c.t, got, sp, c.want)
		}
	}
}

// oracle answers LookupAt the slow way, from the definition: among the
// loads and moves covering addr that happened by t, the last one in file
// order decides; a jitdump that knows nothing defers to the perf map.
type oracleOp struct {
	layer      int
	start, end uint64
	loaded     uint64
	name       string
	tomb       bool
}

func oracle(ops []oracleOp, addr, t uint64) string {
	for layer := 0; layer < numLayers; layer++ {
		for i := len(ops) - 1; i >= 0; i-- {
			o := ops[i]
			if o.layer == layer && addr >= o.start && addr < o.end && o.loaded <= t {
				if o.tomb {
					return ""
				}
				return o.name
			}
		}
	}
	return ""
}

// The index agrees with the oracle on random workloads dense with reuse,
// and indexes taken along the way keep their answers.
func TestIndexMatchesOracle(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			var b builder
			var ops []oracleOp
			type snap struct {
				ix  *Index
				ops []oracleOp
			}
			var snaps []snap
			now := uint64(10)
			const space = 1 << 14
			// Three clusters of code far apart (regions of the
			// lookup view), and now and then a piece spanning them.
			cluster := func() uint64 { return uint64(rng.IntN(3)) << 24 }
			for i := range 600 {
				now += uint64(rng.IntN(20))
				start := cluster() + uint64(rng.IntN(space))
				end := start + 1 + uint64(rng.IntN(space/16))
				if rng.IntN(100) == 0 {
					end = start + uint64(rng.IntN(3<<24))
				}
				o := oracleOp{layer: layerJitdump, start: start, end: end, loaded: now, name: fmt.Sprint("f", i)}
				switch r := rng.IntN(10); {
				case r == 0:
					o.layer, o.loaded = layerPerfMap, 0
				case r == 1:
					o.tomb, o.name = true, ""
				}
				ops = append(ops, o)
				b.add(o.layer, Symbol{Start: o.start, Size: o.end - o.start, Name: o.name, Loaded: o.loaded}, o.tomb)
				if i%97 == 0 {
					snaps = append(snaps, snap{b.index(), append([]oracleOp(nil), ops...)})
				}
			}
			snaps = append(snaps, snap{b.index(), ops})
			for _, sn := range snaps {
				for range 500 {
					addr := cluster() + uint64(rng.IntN(space+space/16))
					if rng.IntN(10) == 0 {
						addr = uint64(rng.IntN(4 << 24))
					}
					at := uint64(rng.IntN(int(now + 50)))
					if rng.IntN(8) == 0 {
						at = math.MaxUint64
					}
					want := oracle(sn.ops, addr, at)
					s, ok := sn.ix.LookupAt(addr, at)
					got := ""
					if ok {
						got = s.Name
						if !s.Contains(addr) {
							t.Fatalf("LookupAt(%#x, %d) = %+v, which does not contain the address", addr, at, s)
						}
					}
					if got != want {
						t.Fatalf("LookupAt(%#x, %d) = %q, oracle says %q", addr, at, got, want)
					}
					// Every time in the span has the same answer.
					_, span, _ := sn.ix.LookupSpan(addr, at)
					if !span.Contains(at) {
						t.Fatalf("LookupSpan(%#x, %d): span %+v does not hold the time asked", addr, at, span)
					}
					last := span.Until - 1
					for _, other := range []uint64{span.From, last, span.From + uint64(rng.Uint64N(last-span.From+1))} {
						if o := oracle(sn.ops, addr, other); o != want {
							t.Fatalf("LookupSpan(%#x, %d) = %q over %+v, but the oracle says %q at %d", addr, at, want, span, o, other)
						}
					}
				}
			}
		})
	}
}

func TestIndexAllInLoadOrder(t *testing.T) {
	var b builder
	for i, start := range []uint64{0x3000, 0x1000, 0x2000, 0x1000} {
		b.add(layerJitdump, Symbol{Start: start, Size: 0x10, Name: fmt.Sprint(i)}, false)
	}
	b.add(layerJitdump, Symbol{Start: 0x3000, Size: 0x10}, true)
	ix := b.index()
	got := names(ix)
	if fmt.Sprint(got) != "[0 1 2 3]" || ix.Len() != 4 {
		t.Errorf("All = %v (Len %d), want [0 1 2 3] without the tombstone", got, ix.Len())
	}
	var nilIx *Index
	if _, ok := nilIx.Lookup(1); ok || nilIx.Len() != 0 {
		t.Error("a nil Index found something")
	}
}

// TestChangedSince: an Index grown from an older one answers as the older
// one did, span and all, everywhere outside the ranges ChangedSince names
// (random loads, moves' vacated ranges and perf map lines, in three
// layers); every symbol added since lies in them; an index of another
// builder (a file read again, an index compacted) is not the older one
// grown.
func TestChangedSince(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 22))
	var b builder
	now := uint64(10)
	const space = 1 << 16
	old := b.index()
	for round := range 40 {
		added := 0
		for range 1 + rng.IntN(30) {
			now += uint64(rng.IntN(20))
			start := uint64(rng.IntN(space))
			sym := Symbol{Start: start, Size: 1 + uint64(rng.IntN(space/64)), Name: fmt.Sprint("f", round), Loaded: now}
			layer := []int{layerGDB, layerJitdump, layerJitdump, layerPerfMap}[rng.IntN(4)]
			if layer == layerPerfMap {
				sym.Loaded = 0
			}
			b.add(layer, sym, rng.IntN(8) == 0)
			added++
		}
		ix := b.index()
		changed, ok := ix.ChangedSince(old)
		if !ok {
			t.Fatalf("round %d: the index grown is not said to be the old one grown", round)
		}
		in := func(addr uint64) bool {
			for _, r := range changed {
				if addr >= r.Start && addr < r.End {
					return true
				}
			}
			return false
		}
		for id := ix.n - added; id < ix.n; id++ {
			s := &ix.store.slot(int32(id)).sym
			if !in(s.Start) || !in(s.End()-1) {
				t.Fatalf("round %d: symbol %+v added, outside the changes %v", round, s, changed)
			}
		}
		for range 2000 {
			addr := uint64(rng.IntN(space + space/64))
			if in(addr) {
				continue
			}
			at := uint64(rng.IntN(int(now + 50)))
			if rng.IntN(8) == 0 {
				at = math.MaxUint64
			}
			s0, sp0, ok0 := old.LookupSpan(addr, at)
			s1, sp1, ok1 := ix.LookupSpan(addr, at)
			if s0 != s1 || sp0 != sp1 || ok0 != ok1 {
				t.Fatalf("round %d: at %#x, time %d, unchanged says %v: old %+v over %+v, new %+v over %+v", round, addr, at, changed, s0, sp0, s1, sp1)
			}
		}
		old = ix
	}
	if _, ok := old.ChangedSince(old); !ok {
		t.Error("an index is not itself unchanged")
	}
	var other builder
	other.add(layerJitdump, Symbol{Start: 0x10, Size: 0x10}, false)
	if _, ok := other.index().ChangedSince(old); ok {
		t.Error("another builder's index is said to be the old one grown")
	}
	if _, ok := old.ChangedSince(other.index()); ok {
		t.Error("an index of another builder, larger, is said to be the old one grown")
	}
}
