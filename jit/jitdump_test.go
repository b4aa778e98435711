package jit

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// everyRecord writes one of each record type, an unknown id, and a header
// larger than 40 bytes.
func everyRecord(big bool) (*dumpWriter, map[string]int64) {
	w := newDumpWriter(big, hdrOpts{extra: 24})
	off := map[string]int64{}
	off["unwinding"] = w.unwinding(90, []byte{1, 2, 3, 4}, []byte{5, 6, 7, 8, 9})
	off["debug"] = w.debug(95, 0x1000,
		dbgEntry{0x1000 + debugAddrBias + 8, 12, 0, "/app/fib.jl"},
		dbgEntry{0x1000 + debugAddrBias, 10, 0, "\xff"},
		dbgEntry{0x1000 + debugAddrBias + 16, 14, 0, "/app/other.jl"})
	off["load1"] = w.load(100, 0x1000, 0x100, 1, "julia_fibonacci_1234")
	off["unknown"] = w.record(99, 150, []byte("a future record type"))
	off["load2"] = w.load(200, 0x2000, 0x80, 2, "jfptr_fibonacci_1235")
	off["move"] = w.move(300, 0x2000, 0x3000, 0x80, 2)
	off["close"] = w.close(400)
	return w, off
}

func TestJitdumpBothByteOrders(t *testing.T) {
	for _, big := range []bool{false, true} {
		t.Run(fmt.Sprintf("big=%v", big), func(t *testing.T) {
			w, _ := everyRecord(big)
			p := writeFile(t, "jit-4242.dump", w.bytes())
			sum, err := Inspect(p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := sum.Header
			if h.BigEndian != big || h.Version != 1 || h.Size != 64 || h.ElfMach != 62 || h.Pid != 4242 || h.Flags != 0 {
				t.Errorf("header = %+v", h)
			}
			want := map[RecordType]int{CodeLoad: 2, CodeMove: 1, CodeDebugInfo: 1, CodeClose: 1, CodeUnwindingInfo: 1}
			if !maps.Equal(sum.Counts, want) || sum.Info.Unknown != 1 || sum.Info.Bad != 0 {
				t.Errorf("counts = %v, unknown %d, bad %d; want %v, 1, 0", sum.Counts, sum.Info.Unknown, sum.Info.Bad, want)
			}
			if sum.FirstTime != 90 || sum.LastTime != 400 {
				t.Errorf("time span = %d..%d, want 90..400", sum.FirstTime, sum.LastTime)
			}
			ix, _, _ := ReadFile(p, Options{})
			s, ok := ix.Lookup(0x1010)
			if !ok || s.Name != "julia_fibonacci_1234" || s.Display != "fibonacci" || s.Runtime != RuntimeLLVM ||
				s.File != "/app/fib.jl" || s.Line != 10 || s.CodeIndex != 1 || s.Loaded != 100 || s.Start != 0x1000 || s.Size != 0x100 {
				t.Errorf("Lookup(0x1010) = %+v, %v", s, ok)
			}
			if s, ok := ix.Lookup(0x3010); !ok || s.Name != "jfptr_fibonacci_1235" || s.Loaded != 300 || s.Start != 0x3000 {
				t.Errorf("Lookup(0x3010) after the move = %+v, %v", s, ok)
			}
			if s, ok := ix.Lookup(0x2010); ok {
				t.Errorf("Lookup(0x2010) after the move = %+v, want nothing", s)
			}
		})
	}
}

// The 0x40 that LLVM and V8 add to debug addresses makes the entry at
// code_addr+0x40 the function's first line; an entry naming "\xff"
// repeats the file before it.
func TestJitdumpDebugInfoFirstLine(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	w.debug(1, 0x5000,
		dbgEntry{0x5000 + debugAddrBias + 0x20, 7, 0, "/src/a.jl"},
		dbgEntry{0x5000 + debugAddrBias, 5, 0, "\xff"})
	w.load(2, 0x5000, 0x40, 1, "julia_a_1")
	// A debug record for other code does not leak onto the next load.
	w.debug(3, 0x9999, dbgEntry{0x9999 + debugAddrBias, 99, 0, "/src/wrong.jl"})
	w.load(4, 0x6000, 0x40, 2, "julia_b_2")
	ix, info := readBytes(t, "jit-1.dump", w.bytes())
	if info.Bad != 0 {
		t.Fatalf("bad records: %v", info.Problems)
	}
	if s, _ := ix.Lookup(0x5000); s == nil || s.File != "/src/a.jl" || s.Line != 5 {
		t.Errorf("a = %+v, want /src/a.jl:5", s)
	}
	if s, _ := ix.Lookup(0x6000); s == nil || s.File != "" || s.Line != 0 {
		t.Errorf("b = %+v, want no file", s)
	}
}

func TestJitdumpArchTimestamp(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{flags: FlagArchTimestamp})
	w.load(1000, 0x1000, 0x10, 1, "julia_a_1")
	p := writeFile(t, "jit-1.dump", w.bytes())

	ix, info, err := ReadFile(p, Options{})
	if err != nil || !info.ArchTimestamp {
		t.Fatalf("ArchTimestamp = %v, %v", info.ArchTimestamp, err)
	}
	if s, _ := ix.Lookup(0x1000); s == nil || s.Loaded != 0 {
		t.Errorf("without a converter Loaded = %+v, want 0 (unknown clock)", s)
	}
	ix, _, _ = ReadFile(p, Options{ConvertTSC: func(tsc uint64) uint64 { return tsc * 2 }})
	if s, _ := ix.Lookup(0x1000); s == nil || s.Loaded != 2000 {
		t.Errorf("with a converter Loaded = %+v, want 2000", s)
	}
}

// Each defect is reported with the file, the record's offset and the
// reason; records after a defect whose size is sound are still read.
func TestJitdumpDefects(t *testing.T) {
	type check func(t *testing.T, ix *Index, info SourceInfo, offs map[string]int64)
	cases := []struct {
		name  string
		write func(w *dumpWriter, offs map[string]int64)
		check check
	}{
		{"code_size larger than the record", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.record(uint32(CodeLoad), 1, w.body(uint32(1), uint32(1), uint64(0x1000), uint64(0x1000), uint64(1<<40), uint64(1), "liar", make([]byte, 8)))
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, expectBad("lie", "code_size 1099511627776 larger than the 8 bytes left")},
		{"name without NUL", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.record(uint32(CodeLoad), 1, w.body(uint32(1), uint32(1), uint64(0x1000), uint64(0x1000), uint64(0), uint64(1), []byte("no terminator")))
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, expectBad("lie", "name not NUL-terminated")},
		{"nr_entry beyond the record", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.record(uint32(CodeDebugInfo), 1, w.body(uint64(0x2000), uint64(1<<60)))
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, expectBad("lie", "nr_entry 1152921504606846976 cannot fit")},
		{"debug entry past the end", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.record(uint32(CodeDebugInfo), 1, w.body(uint64(0x2000), uint64(2), uint64(0x2040), int32(1), int32(0), "/a.js", bytes.Repeat([]byte{0xab}, 17)))
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, expectBad("lie", "file name not NUL-terminated")},
		{"stale bytes for a file name", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.debug(1, 0x2000, dbgEntry{0x2040, 1, 19, "\x93\x1d\x04"})
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, expectBad("lie", "file name is not text")},
		{"empty file name", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.debug(1, 0x2000, dbgEntry{0x2040, 14, 0, "/a.js"}, dbgEntry{0x2040, 15, 0, ""})
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:14:1")
		}, expectBad("lie", "entry 1's file name is empty")},
		{"first entry repeats a file name", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.debug(1, 0x2000, dbgEntry{0x2040, 14, 0, "\xff"})
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:14:1")
		}, expectBad("lie", "entry 0 repeats the file name of an entry before it, and there is none")},
		{"unwinding_size beyond the record", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.record(uint32(CodeUnwindingInfo), 1, w.body(uint64(1<<50), uint64(0), uint64(0)))
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, expectBad("lie", "unwinding_size 1125899906842624 larger")},
		{"CODE_MOVE too short", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.record(uint32(CodeMove), 1, w.body(uint64(1)))
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, expectBad("lie", "CODE_MOVE of 24 bytes")},
		{"CODE_MOVE of unknown code", func(w *dumpWriter, offs map[string]int64) {
			offs["lie"] = w.move(1, 0x7000, 0x8000, 0x10, 9)
			w.load(2, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, func(t *testing.T, ix *Index, info SourceInfo, offs map[string]int64) {
			wantProblem(t, info, offs["lie"], "no code known there")
			if _, ok := ix.Lookup(0x8000); ok {
				t.Error("a move of unknown code created a symbol")
			}
		}},
		{"total_size smaller than the prefix", func(w *dumpWriter, offs map[string]int64) {
			w.load(1, 0x1000, 0x10, 1, "JS:*before /a.js:1:1")
			offs["lie"] = w.rawRecord(uint32(CodeLoad), 8, 2, nil)
			w.load(3, 0x2000, 0x10, 2, "JS:*after /a.js:1:1")
		}, func(t *testing.T, ix *Index, info SourceInfo, offs map[string]int64) {
			if info.Broken == nil || info.Broken.Offset != offs["lie"] || !strings.Contains(info.Broken.Reason, "smaller than its 16-byte prefix") {
				t.Errorf("Broken = %v, want the record at %d", info.Broken, offs["lie"])
			}
			if got := names(ix); !slices.Equal(got, []string{"JS:*before /a.js:1:1"}) {
				t.Errorf("symbols = %q, want only the one before the break", got)
			}
		}},
		{"total_size beyond the file", func(w *dumpWriter, offs map[string]int64) {
			w.load(1, 0x1000, 0x10, 1, "JS:*before /a.js:1:1")
			offs["lie"] = w.rawRecord(uint32(CodeLoad), 0xfffffff0, 2, make([]byte, 100))
		}, func(t *testing.T, ix *Index, info SourceInfo, offs map[string]int64) {
			if info.Truncated == nil || info.Truncated.Offset != offs["lie"] || !strings.Contains(info.Truncated.Reason, "incomplete") {
				t.Errorf("Truncated = %v, want the record at %d", info.Truncated, offs["lie"])
			}
			if ix.Len() != 1 {
				t.Errorf("Len = %d, want 1", ix.Len())
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newDumpWriter(false, hdrOpts{})
			offs := map[string]int64{}
			c.write(w, offs)
			p := writeFile(t, "jit-7.dump", w.bytes())
			ix, info, err := ReadFile(p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, pr := range info.Problems {
				if pr.File != p || !strings.Contains(pr.Error(), p+": offset ") {
					t.Errorf("problem %q does not name the file %s and an offset", pr, p)
				}
			}
			c.check(t, ix, info, offs)
		})
	}
}

func expectBad(key, reason string) func(t *testing.T, ix *Index, info SourceInfo, offs map[string]int64) {
	return func(t *testing.T, ix *Index, info SourceInfo, offs map[string]int64) {
		t.Helper()
		if info.Bad != 1 {
			t.Errorf("Bad = %d, want 1", info.Bad)
		}
		wantProblem(t, info, offs[key], reason)
		if s, ok := ix.Lookup(0x2000); !ok || s.Display != "after" {
			t.Errorf("the record after the defect was not read: %+v", s)
		}
	}
}

func wantProblem(t *testing.T, info SourceInfo, off int64, reason string) {
	t.Helper()
	for _, p := range info.Problems {
		if p.Offset == off && strings.Contains(p.Reason, reason) {
			return
		}
	}
	t.Errorf("no problem at offset %d containing %q; problems: %v", off, reason, info.Problems)
}

func TestJitdumpBadHeader(t *testing.T) {
	good := newDumpWriter(false, hdrOpts{}).bytes()
	for _, c := range []struct {
		name   string
		b      []byte
		reason string
	}{
		{"magic", append([]byte("ELF\x7f"), good[4:]...), "bad magic"},
		{"version", func() []byte { b := slices.Clone(good); b[4] = 2; return b }(), "version 2"},
		{"total_size", func() []byte { b := slices.Clone(good); b[8] = 8; return b }(), "header total_size 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, "jit-1.dump", c.b)
			s, err := Inspect(p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "magic" {
				// Not a jitdump: read as a perf map, and every line is bad.
				if s.Info.Kind != KindPerfMap || s.Info.Bad == 0 {
					t.Errorf("garbage read as %v with %d bad lines", s.Info.Kind, s.Info.Bad)
				}
				return
			}
			if s.Info.Broken == nil || s.Info.Broken.Offset != 0 || !strings.Contains(s.Info.Broken.Reason, c.reason) {
				t.Errorf("Broken = %v, want %q at offset 0", s.Info.Broken, c.reason)
			}
		})
	}
}

// A size field never drives an allocation: a small file claiming huge
// records costs what the file holds.
func TestJitdumpLyingSizesAllocateLittle(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	w.record(uint32(CodeDebugInfo), 1, w.body(uint64(0x2000), uint64(1<<62)))
	w.record(uint32(CodeLoad), 1, w.body(uint32(1), uint32(1), uint64(0x1000), uint64(0x1000), ^uint64(0)>>1, uint64(1), "x"))
	w.rawRecord(uint32(CodeUnwindingInfo), 0xffffffff, 1, make([]byte, 64))
	p := writeFile(t, "jit-1.dump", w.bytes())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, _, err := ReadFile(p, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 64<<10 {
		t.Errorf("reading a %d-byte file allocated %d bytes", len(w.bytes()), per)
	}
}

// Garbage after a good header: reading stops or skips, never panics, and
// every defect names the file and an offset inside it.
func TestJitdumpGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 50 {
		w := newDumpWriter(i%2 == 1, hdrOpts{})
		w.load(1, 0x1000, 0x10, 1, "JS:*first /a.js:1:1")
		junk := make([]byte, 16+rng.IntN(4000))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		b := append(w.bytes(), junk...)
		p := writeFile(t, "jit-1.dump", b)
		ix, info, err := ReadFile(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := ix.Lookup(0x1000); !ok || s.Display != "first" {
			t.Fatalf("the record before the garbage was lost: %+v", info)
		}
		if info.Broken == nil && info.Truncated == nil && info.Bad == 0 && info.Unknown == 0 {
			t.Fatalf("%d bytes of garbage went unnoticed: %+v", len(junk), info)
		}
		for _, pr := range append(info.Problems, info.Truncated) {
			if pr != nil && (pr.File != p || pr.Offset < headerSize || pr.Offset >= int64(len(b))) {
				t.Fatalf("problem %v outside the garbage", pr)
			}
		}
	}
}
