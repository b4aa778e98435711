package objfile

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// The parsers below read files the target controls. Each fuzz target
// checks that bad input gives an error or an unnamed address: no panic,
// no hang, and no allocation beyond a bound proportional to the input
// (measured, not assumed).

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// checkAlloc fails t when f allocates more than perByte bytes per input
// byte plus a fixed slack.
func checkAlloc(t *testing.T, what string, input int, perByte uint64, f func()) {
	t.Helper()
	const slack = 4 << 20
	if n := allocated(f); n > uint64(input)*perByte+slack {
		t.Fatalf("%s of %d bytes allocated %d bytes (bound %d)", what, input, n, uint64(input)*perByte+slack)
	}
}

// exerciseELF opens an image and looks up addresses around its symbols
// and segments.
func exerciseELF(t *testing.T, data []byte) {
	f, err := OpenImage("/nonexistent/fuzz", "fuzz", data)
	if err != nil {
		return
	}
	defer f.Close()
	s, err := f.Symbols(Env{DebugDirs: []string{}})
	if err != nil {
		t.Fatalf("Symbols of an open file: %v", err)
	}
	addrs := []uint64{0, 1, 0x1000, ^uint64(0)}
	for _, l := range f.loads {
		addrs = append(addrs, l.Vaddr, l.Vaddr+l.Filesz/2)
		f.Bias(0x7f0000000000+l.Off, l.Off, l.Flags&elf.PF_X != 0)
	}
	for i, sy := range s.syms.syms {
		if i > 64 {
			break
		}
		addrs = append(addrs, sy.addr, sy.addr+sy.size/2)
	}
	for _, a := range addrs {
		for _, fr := range s.Frames(a) {
			if len(fr.Func) > len(data) || len(fr.File) > len(data) {
				t.Fatalf("name longer than the file: %q", fr.Func)
			}
		}
	}
	if cfi, err := f.CFI(); err == nil && cfi != nil {
		for _, a := range addrs {
			cfi.RowAt(a)
		}
	}
}

func FuzzELF(f *testing.F) {
	// Small images only: the fuzzer minimizes what it finds, and an
	// image of 20 KB takes it longer than a fuzzing run lasts. DWARF has
	// its own target, on sections cut from a real program.
	if b := ownVDSOImage(); b != nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Sections may inflate (compressed DWARF, MiniDebugInfo): the
		// bound is the inflation limits', per byte of input.
		checkAlloc(t, "ELF image", len(data), maxInflateRatio*4, func() { exerciseELF(t, data) })
	})
}

// ownVDSOImage is this process's vdso, a small real ELF image.
func ownVDSOImage() []byte {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasSuffix(line, "[vdso]") {
			continue
		}
		var lo, hi uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err != nil {
			return nil
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil
		}
		defer mem.Close()
		img := make([]byte, hi-lo)
		if _, err := mem.ReadAt(img, int64(lo)); err != nil {
			return nil
		}
		return img
	}
	return nil
}

// tinyProgram compiles a small C program with an inlined function (gcc
// -O2 -g) and returns it, or nil without gcc.
func tinyProgram(f *testing.F) *elf.File {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return nil
	}
	out := f.TempDir() + "/tiny"
	src := "static inline int sq(int x){return x*x;}\nint f(int x){return sq(x)+1;}\nint main(void){return f(3);}\n"
	cmd := exec.Command(gcc, "-O2", "-g", "-x", "c", "-o", out, "-")
	cmd.Stdin = bytes.NewReader([]byte(src))
	if cmd.Run() != nil {
		return nil
	}
	ef, err := elf.Open(out)
	if err != nil {
		return nil
	}
	f.Cleanup(func() { ef.Close() })
	return ef
}

// FuzzDWARF feeds damaged DWARF sections to the unit index, the line
// table check and reader, the function tree and the name resolution.
func FuzzDWARF(f *testing.F) {
	if ef := tinyProgram(f); ef != nil {
		var secs [5][]byte
		for i, name := range []string{".debug_info", ".debug_abbrev", ".debug_line", ".debug_str", ".debug_line_str"} {
			if s := ef.Section(name); s != nil {
				secs[i], _ = s.Data()
			}
		}
		f.Add(secs[0], secs[1], secs[2], secs[3], secs[4])
	}
	f.Fuzz(func(t *testing.T, info, abbrev, line, str, lineStr []byte) {
		size := len(info) + len(abbrev) + len(line) + len(str) + len(lineStr)
		checkAlloc(t, "DWARF", size, 256, func() {
			dl := &dwarfLines{name: "fuzz", names: map[dwarf.Offset]string{}, line: line, bo: binary.LittleEndian}
			err := safely("fuzz", func() error {
				d, err := dwarf.New(abbrev, nil, nil, info, line, nil, nil, str)
				if err != nil {
					return err
				}
				if err := d.AddSection(".debug_line_str", lineStr); err != nil {
					return err
				}
				dl.d = d
				return dl.index()
			})
			if err != nil {
				return
			}
			for i, r := range dl.ranges {
				if i > 16 {
					break
				}
				for _, a := range []uint64{r.lo, r.lo + (r.hi-r.lo)/2, r.hi - 1} {
					if _, err := dl.frames(a); err != nil && strings.Contains(err.Error(), "panicked") {
						t.Fatal(err)
					}
				}
			}
		})
	})
}

func FuzzXZ(f *testing.F) {
	if xz, err := exec.LookPath("xz"); err == nil {
		for _, preset := range []string{"-0", "-6", "-9"} {
			cmd := exec.Command(xz, preset, "-c")
			cmd.Stdin = bytes.NewReader(bytes.Repeat([]byte("MiniDebugInfo "), 200))
			if out, err := cmd.Output(); err == nil {
				f.Add(out)
			}
		}
	}
	f.Add(append(append([]byte{}, xzMagic...), 0, 1, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out []byte
		var err error
		// The decoder's dictionary is capped at 64 KiB; the output at
		// maxMiniDebugInfo.
		n := allocated(func() { out, err = inflateXZ(data) })
		if err == nil && len(out) > maxMiniDebugInfo {
			t.Fatalf("inflated %d bytes, limit %d", len(out), maxMiniDebugInfo)
		}
		if n > 2*maxMiniDebugInfo+8<<20 {
			t.Fatalf("inflating %d bytes allocated %d", len(data), n)
		}
	})
}

// FuzzGoTable: any pclntab parses or is refused; every pc of it can be
// named and its frame size read, without panicking or allocating beyond
// the names it returns.
func FuzzGoTable(f *testing.F) {
	// This test binary is a Go program: its pclntab is a real seed, cut
	// short so that the fuzzer can work on it.
	if exe, err := os.Executable(); err == nil {
		if ef, err := elf.Open(exe); err == nil {
			if s := ef.Section(".gopclntab"); s != nil {
				if b, err := s.Data(); err == nil && len(b) > 4096 {
					f.Add(b[:4096])
				}
			}
			ef.Close()
		}
	}
	f.Add(goTableFixture())
	f.Add([]byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAlloc(t, "pclntab", len(data), 8, func() {
			g, err := ParseGoTable(data, 0x1000, "fuzz")
			if err != nil || g == nil {
				return
			}
			for _, pc := range []uint64{0, 0x1000, 0x1001, 0x1010, 0x1020, 0x1fff, 0x401000} {
				fn, file, line, ok := g.Line(pc)
				if ok && (fn == "" || len(fn) > len(data) || len(file) > len(data) || line < 0) {
					t.Fatalf("Line(%#x) = %q %q %d", pc, fn, file, line)
				}
				if d, ok := g.SPDelta(pc); ok && d > 1<<30 {
					t.Fatalf("SPDelta(%#x) = %d", pc, d)
				}
				g.FrameKind(pc)
			}
			g.addTo(&symtab{})
		})
	})
}

func FuzzDebugLink(f *testing.F) {
	f.Add([]byte("prog.debug\x00\x00\x12\x34\x56\x78"))
	f.Add([]byte("../../etc/shadow\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		name, _, err := parseDebugLink(data, "fuzz", binary.LittleEndian)
		if err == nil && (name == "" || bytes.ContainsAny([]byte(name), "/\x00")) {
			t.Fatalf("accepted debuglink name %q", name)
		}
	})
}

// FuzzEhFrame: any section parses or is refused, and every FDE it yields
// can be evaluated at any address, within a bound of its size.
func FuzzEhFrame(f *testing.F) {
	e := &ehBuilder{addr: 0x1000}
	c := gccCIE(e)
	e.fde(c, 0x2000, 0x40, cat([]byte{cfaAdvanceLoc | 1, cfaDefCfaOffset}, uleb(16), []byte{cfaOffset | RegRBP}, uleb(2), []byte{cfaRememberState, cfaRestoreState}))
	e.fde(c, 0x3000, 0x20, cat([]byte{cfaDefCfaExpression, 3, 0x77, 8, 0x06}))
	f.Add(e.done())
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAlloc(t, ".eh_frame", len(data), 64, func() {
			fr, err := ParseEhFrame("fuzz", data, 0x1000)
			if err != nil {
				return
			}
			if fr.Len()+fr.Bad > len(data)/8+1 {
				t.Fatalf("%d FDEs from %d bytes", fr.Len()+fr.Bad, len(data))
			}
			mem := dump{base: 0x7000, b: make([]byte, 256)}
			for _, d := range fr.fdes {
				for _, pc := range []uint64{d.begin, d.begin + (d.end-d.begin)/2, d.end - 1} {
					row, err := fr.RowAt(pc)
					if err != nil || row == nil {
						continue
					}
					var rs RegState
					rs.Set(RegRSP, 0x7000)
					rs.Set(RegRBP, 0x7010)
					if row.CFAExpr != nil {
						EvalExpr(row.CFAExpr, &rs, mem)
					}
					for _, r := range row.Regs {
						if r.Expr != nil {
							EvalExpr(r.Expr, &rs, mem, 0x7008)
						}
					}
				}
			}
		})
	})
}

// FuzzExpr: DWARF expressions evaluate or fail, never panic or run away,
// and a trailing DW_OP_nop changes nothing.
func FuzzExpr(f *testing.F) {
	f.Add([]byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22})
	f.Add([]byte{0x77, 0x10, 0x06, 0x23, 0x08})
	f.Add([]byte{0x30, 0x28, 0x02, 0x00, 0x31, 0x2f, 0x01, 0x00, 0x32})
	f.Fuzz(func(t *testing.T, expr []byte) {
		var rs RegState
		rs.Set(RegRSP, 0x7000)
		rs.Set(RegRA, 0x1234)
		mem := dump{base: 0x7000, b: make([]byte, 64)}
		v1, err1 := EvalExpr(expr, &rs, mem, 0x7008)
		v2, err2 := EvalExpr(append(append([]byte(nil), expr...), 0x96), &rs, mem, 0x7008)
		if err1 == nil && (err2 != nil || v1 != v2) {
			t.Fatalf("%x: %#x, %v; with a nop after it %#x, %v", expr, v1, err1, v2, err2)
		}
	})
}

// dump is memory holding b at base.
type dump struct {
	base uint64
	b    []byte
}

func (d dump) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < d.base || addr-d.base >= uint64(len(d.b)) {
		return 0, errOutside
	}
	n := copy(p, d.b[addr-d.base:])
	if n < len(p) {
		return n, errOutside
	}
	return n, nil
}

var errOutside = os.ErrNotExist
