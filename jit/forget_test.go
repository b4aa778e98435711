package jit

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// follower reads a jitdump round by round into a builder, as a Process
// follows a growing file.
type follower struct {
	s *source
	b *builder
}

func newFollower(l limits) *follower {
	s := &source{info: SourceInfo{Path: "forget.dump"}, dump: newDumpReader("forget.dump")}
	s.configure(Options{LineTables: true})
	return &follower{s: s, b: &builder{limits: l}}
}

func (f *follower) read(t *testing.T, data []byte) {
	t.Helper()
	err := f.s.dump.read(bytes.NewReader(data), int64(len(data)), func(r *record) { f.s.record(f.b, r); f.b.bound() })
	if err != nil {
		t.Fatal(err)
	}
	f.s.sync()
	f.s.syncLosses(f.b)
}

// TestForgetKeepsWhatLookupsNeed: a runtime that recompiles its
// functions round after round, over the same memory and at new places,
// moving some: told after each round that no lookup comes before the
// round's start, the index retires what was replaced earlier — its size
// stays flat while the runtime's output grows without end — and every
// lookup from the horizon on finds what an index that forgets nothing
// finds, line tables included.
func TestForgetKeepsWhatLookupsNeed(t *testing.T) {
	defer func(n int) { retireEvery = n }(retireEvery)
	retireEvery = 64
	const rounds, perRound = 60, 200
	rng := rand.New(rand.NewPCG(1, 2))
	w := newDumpWriter(false, hdrOpts{})
	forgetful, whole := newFollower(limits{}), newFollower(limits{})
	ts := uint64(1000)
	var sizes []int
	for r := range rounds {
		roundStart := ts
		for range perRound {
			ts += 10
			addr := 0x100000 + uint64(rng.IntN(400))*0x40
			size := 0x20 + uint64(rng.IntN(4))*0x40 // spans one to four slots: partial overlaps
			if rng.IntN(10) == 0 {
				w.move(ts, addr, addr+0x1000000, size, uint64(rng.IntN(1000)))
				continue
			}
			w.debug(ts, addr, dbgEntry{addr + 0x40, int32(r), 0, "/app/f.jl"}, dbgEntry{addr + 0x50, int32(ts), 0, "\xff"})
			w.load(ts, addr, size, ts, fmt.Sprintf("julia_f%d_%d", r, ts))
		}
		data := w.bytes()
		forgetful.read(t, data)
		whole.read(t, data)
		forgetful.b.forget(roundStart)
		forgetful.s.syncLosses(forgetful.b)
		fix, wix := forgetful.b.index(), whole.b.index()
		sizes = append(sizes, fix.n)
		for range 300 {
			addr := 0x100000 + uint64(rng.IntN(400*0x40+0x100))
			if rng.IntN(5) == 0 {
				addr += 0x1000000
			}
			at := roundStart + uint64(rng.IntN(int(ts-roundStart)+20))
			fs, fok := fix.LookupAt(addr, at)
			ws, wok := wix.LookupAt(addr, at)
			if fok != wok || fok && (fs.Name != ws.Name || fs.Loaded != ws.Loaded) {
				t.Fatalf("round %d: LookupAt(%#x, %d) = %v %v, the whole index says %v %v", r, addr, at, fs, fok, ws, wok)
			}
			if fok {
				ff, fl, fok := fix.LineAt(fs, addr)
				wf, wl, wok := wix.LineAt(ws, addr)
				if ff != wf || fl != wl || fok != wok {
					t.Fatalf("round %d: LineAt(%s, %#x) = %s:%d, the whole index says %s:%d", r, fs.Name, addr, ff, fl, wf, wl)
				}
			}
		}
	}
	info := forgetful.s.info
	if info.Forgotten != 0 || info.Dropped != 0 || info.Retired == 0 {
		t.Errorf("retired %d, forgotten %d, dropped %d: want code retired, none lost", info.Retired, info.Forgotten, info.Dropped)
	}
	last, full := sizes[len(sizes)-1], whole.b.index().n
	if peak := maxInt(sizes[rounds/2:]); peak > 2*maxInt(sizes[:rounds/2]) || last*4 > full {
		t.Errorf("the forgetting index held %v symbols round after round (the whole one %d at the end): want it flat", sizes, full)
	}
	t.Logf("symbols held per round: %v; whole index %d; retired %d", sizes, full, info.Retired)
}

// TestBoundKeepsCodeAfterTheHorizon: at the memory bound, code replaced
// since the horizon is kept when it fits, and what was replaced before is
// retired, not counted as lost.
func TestBoundKeepsCodeAfterTheHorizon(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	const funcs = 20
	for r := range 10 {
		for f := range funcs {
			ts := uint64(r*funcs + f + 1)
			w.load(ts, uint64(0x10000+f*0x100), 0x80, ts, fmt.Sprintf("f%d_%d", f, r))
		}
	}
	f := newFollower(limits{symbols: 150, nameBytes: 1 << 20, lines: 1 << 20})
	f.b.forget(8*funcs + 1) // the last two rounds may still be looked up
	f.read(t, w.bytes())
	ix := f.b.index()
	if ix.n > 150 {
		t.Fatalf("held %d symbols, bound 150", ix.n)
	}
	for fn := range funcs {
		s, ok := ix.LookupAt(uint64(0x10000+fn*0x100), uint64(8*funcs+fn+1))
		if want := fmt.Sprintf("f%d_8", fn); !ok || s.Name != want {
			t.Errorf("f%d at the horizon: %v %v, want %s (replaced after the horizon, kept)", fn, s, ok, want)
		}
	}
	if f.s.info.Forgotten != 0 || f.s.info.Retired == 0 {
		t.Errorf("forgotten %d, retired %d: code replaced before the horizon is retired, not lost", f.s.info.Forgotten, f.s.info.Retired)
	}
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
