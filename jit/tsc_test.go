package jit

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

func TestTSCConversion(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		c := TSCConversion{Mult: rng.Uint32(), Shift: uint16(rng.IntN(40)), Zero: rng.Uint64() >> 4, Offset: rng.Int64N(1<<40) - 1<<39}
		tsc := rng.Uint64() >> uint(rng.IntN(20))
		want := new(big.Int).Mul(new(big.Int).SetUint64(tsc), new(big.Int).SetUint64(uint64(c.Mult)))
		want.Rsh(want, uint(c.Shift))
		want.Add(want, new(big.Int).SetUint64(c.Zero))
		want.Add(want, big.NewInt(c.Offset))
		want.And(want, new(big.Int).SetUint64(^uint64(0)))
		if got := c.Nanos(tsc); got != want.Uint64() {
			t.Fatalf("%+v.Nanos(%d) = %d, want %d", c, tsc, got, want.Uint64())
		}
	}
	// A 3 GHz counter as perf describes it: mult/2^shift = 1/3 ns a tick.
	c := TSCConversion{Mult: 1 << 31 / 3, Shift: 31, Zero: 1000}
	if got := c.Nanos(3_000_000_000); got < 1000+999_999_999 || got > 1000+1_000_000_000 {
		t.Errorf("one second of a 3 GHz TSC = %d ns", got-1000)
	}
	// Used as the hook, it puts ARCH_TIMESTAMP loads on the samples' clock.
	w := newDumpWriter(false, hdrOpts{flags: FlagArchTimestamp})
	w.load(3_000_000_000, 0x1000, 0x10, 1, "julia_f_1")
	ix, _, err := ReadFile(writeFile(t, "jit-1.dump", w.bytes()), Options{ConvertTSC: c.Nanos})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := ix.LookupAt(0x1000, 1000+1_000_000_000); !ok || s.Loaded != c.Nanos(3_000_000_000) {
		t.Errorf("LookupAt after the converted load = %+v", s)
	}
	if _, ok := ix.LookupAt(0x1000, 1000+999_000_000); ok {
		t.Error("found before its converted load time")
	}
}
