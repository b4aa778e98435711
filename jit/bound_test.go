package jit

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// readBounded reads a jitdump held in memory into an index bounded by l.
func readBounded(t *testing.T, data []byte, l limits) (*Index, SourceInfo) {
	t.Helper()
	s := &source{info: SourceInfo{Path: "bound.dump"}, dump: newDumpReader("bound.dump")}
	s.configure(Options{LineTables: true})
	b := builder{limits: l}
	err := s.dump.read(bytes.NewReader(data), int64(len(data)), func(r *record) { s.record(&b, r); b.bound() })
	if err != nil {
		t.Fatal(err)
	}
	s.sync()
	s.syncLosses(&b)
	return b.index(), s.info
}

// TestIndexBoundForgetsReplacedCode: a runtime that reloads the same
// functions forever (as V8 and the JVM recompile) never grows the index
// past its bound; the code live now is always found, with its line
// table; what the bound cost is counted.
func TestIndexBoundForgetsReplacedCode(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	const funcs, rounds = 20, 50
	for r := range rounds {
		for f := range funcs {
			addr := uint64(0x10000 + f*0x100)
			ts := uint64(r*funcs + f + 1)
			w.debug(ts, addr, dbgEntry{addr + 0x40, int32(r*10 + f), 0, "/app/a.js"}, dbgEntry{addr + 0x48, int32(r*10 + f + 1), 0, "\xff"})
			w.load(ts, addr, 0x80, uint64(f), fmt.Sprintf("JS:*f%d /app/a.js:%d:1", f, r))
		}
	}
	l := limits{symbols: 100, nameBytes: 1 << 20, lines: 1 << 20}
	ix, info := readBounded(t, w.bytes(), l)
	if ix.n > l.symbols {
		t.Fatalf("index holds %d symbols, bound %d", ix.n, l.symbols)
	}
	if info.Symbols != funcs*rounds || info.Dropped != 0 || info.Forgotten == 0 || info.Forgotten+ix.n != funcs*rounds {
		t.Errorf("symbols %d, forgotten %d, dropped %d, held %d; want %d read, none dropped, the rest forgotten",
			info.Symbols, info.Forgotten, info.Dropped, ix.n, funcs*rounds)
	}
	for f := range funcs {
		addr := uint64(0x10000 + f*0x100)
		s, ok := ix.Lookup(addr + 8)
		if want := fmt.Sprintf("JS:*f%d /app/a.js:%d:1", f, rounds-1); !ok || s.Name != want {
			t.Fatalf("Lookup(f%d) = %+v, want the latest code %q", f, s, want)
		}
		if file, line, ok := ix.LineAt(s, addr+8); !ok || file != "/app/a.js" || line != (rounds-1)*10+f+1 {
			t.Errorf("LineAt(f%d) = %s:%d %v after compaction", f, file, line, ok)
		}
	}
}

// TestIndexBoundDropsOldestLiveCode: more live code than the bound holds
// (a hostile jitdump of millions of tiny functions): the newest is kept,
// the oldest dropped and counted, and names are cut.
func TestIndexBoundDropsOldestLiveCode(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	const n = 1000
	for i := range n {
		name := fmt.Sprintf("f%d", i)
		if i == n-1 {
			name += strings.Repeat("x", 2*maxNameLen)
		}
		w.load(uint64(i+1), uint64(0x10000+i*0x10), 0x10, uint64(i), name)
	}
	l := limits{symbols: 100, nameBytes: 1 << 20, lines: 1 << 20}
	ix, info := readBounded(t, w.bytes(), l)
	if ix.n > l.symbols || info.Dropped == 0 || info.Dropped+ix.n != n {
		t.Fatalf("held %d (bound %d), dropped %d of %d", ix.n, l.symbols, info.Dropped, n)
	}
	if _, ok := ix.Lookup(0x10000); ok {
		t.Error("the oldest code is still there")
	}
	s, ok := ix.Lookup(uint64(0x10000 + (n-1)*0x10))
	if !ok || len(s.Name) != maxNameLen || !strings.HasPrefix(s.Name, "f999x") {
		t.Errorf("the newest code: %v, name of %d bytes", ok, len(s.Name))
	}
	// The byte budget bounds too: 1,000 names of ~4 bytes in 1 KiB.
	ix, info = readBounded(t, w.bytes(), limits{symbols: 1 << 20, nameBytes: 1 << 10, lines: 1 << 20})
	names := 0
	for s := range ix.All() {
		names += symbolBytes(s)
	}
	if names > 1<<10 || info.Dropped == 0 {
		t.Errorf("%d name bytes held, %d dropped", names, info.Dropped)
	}
}

// TestInspectBounded: Inspect counts what streams by, whatever the bound
// dropped, and says what the bound cost.
func TestInspectBounded(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	const n = 3 * MaxSymbols / 2 / 2 // past inspectLimits
	for i := range n {
		w.load(uint64(i+1), uint64(0x10000+i*0x10), 0x10, uint64(i), "f")
	}
	w.load(n+1, 0x10000+(n-1)*0x10, 0x20, n, "big")
	sum, err := Inspect(writeFile(t, "jit-1.dump", w.bytes()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Symbols != n+1 || sum.Reused != 1 || sum.Largest[0].Name != "big" || sum.Info.Dropped == 0 {
		t.Errorf("symbols %d, reused %d, largest %q, dropped %d", sum.Symbols, sum.Reused, sum.Largest[0].Name, sum.Info.Dropped)
	}
	var out strings.Builder
	sum.WriteText(&out)
	if !strings.Contains(out.String(), "live code ranges dropped, oldest first, at the memory bound") {
		t.Errorf("inspect does not say what the bound cost:\n%s", out.String())
	}
}
