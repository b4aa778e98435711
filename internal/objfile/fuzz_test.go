package objfile

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// The parsers below read files the target controls. Each fuzz target
// checks that bad input gives an error or an unnamed address: no panic,
// no hang, and no allocation beyond a bound proportional to the input
// (measured, not assumed).

// noPanics fails t if safely caught a panic while f ran: the net must
// never be what holds.
func noPanics(t *testing.T, what string, f func()) {
	t.Helper()
	before := recoveredPanics.Load()
	f()
	if n := recoveredPanics.Load() - before; n != 0 {
		t.Fatalf("%s: %d panics caught by safely", what, n)
	}
}

// checkAlloc fails t when f allocates more than perByte bytes per input
// byte plus a fixed slack.
func checkAlloc(t *testing.T, what string, input int, perByte uint64, f func()) {
	t.Helper()
	const slack = 4 << 20
	if n := testutil.HeapBytes(f); n > uint64(input)*perByte+slack {
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
	// A runtime's data symbols: as many as the tables hold at most, no
	// table longer than the file.
	if ints, err := f.DataInts(""); len(ints) > MaxInts || (err == nil && len(ints) > len(data)/16) {
		t.Fatalf("%d data symbols (%v) in a file of %d bytes", len(ints), err, len(data))
	}
	if b, _ := f.DataBytes("table"); len(b) > MaxDataBytes {
		t.Fatalf("a data symbol of %d bytes in a file of %d", len(b), len(data))
	}
	names, _ := f.LookupNames([]string{"_PyRuntime", "main", "_start"})
	if len(names) > 3 {
		t.Fatalf("LookupNames of 3 names found %d", len(names))
	}
	if secs := f.Sections(); len(secs) > len(data)/40+1 {
		t.Fatalf("%d sections in %d bytes", len(secs), len(data))
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
		noPanics(t, "ELF image", func() {
			checkAlloc(t, "ELF image", len(data), maxInflateRatio*4, func() { exerciseELF(t, data) })
		})
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
		noPanics(t, "DWARF", func() { exerciseDWARF(t, size, info, abbrev, line, str, lineStr) })
	})
}

func exerciseDWARF(t *testing.T, size int, info, abbrev, line, str, lineStr []byte) {
	checkAlloc(t, "DWARF", size, 256, func() {
		dl := &dwarfLines{name: "fuzz", names: map[dwarf.Offset]dieName{}, qual: map[dwarf.Offset]string{}, line: line, bo: binary.LittleEndian}
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
				dl.frames(a)
			}
		}
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
		n := testutil.HeapBytes(func() { out, err = inflateXZ(data) })
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
		noPanics(t, "pclntab", func() { exerciseGoTable(t, data) })
	})
}

func exerciseGoTable(t *testing.T, data []byte) {
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
}

// FuzzDebugLink: a name that is accepted is a plain file name, and a
// section written from a plain name and a CRC reads back as both.
func FuzzDebugLink(f *testing.F) {
	f.Add([]byte("prog.debug\x00\x00\x12\x34\x56\x78"), "prog.debug", uint32(0x12345678))
	f.Add([]byte("../../etc/shadow\x00\x00\x00\x00\x00\x00\x00\x00"), "a", uint32(0))
	f.Add([]byte("\x00"), "", uint32(1))
	plain := func(name string) bool {
		return name != "" && !strings.ContainsAny(name, "/\x00") && name != "." && name != ".."
	}
	f.Fuzz(func(t *testing.T, data []byte, name string, crc uint32) {
		if got, _, err := parseDebugLink(data, "fuzz", binary.LittleEndian); err == nil && !plain(got) {
			t.Fatalf("accepted debuglink name %q", got)
		}
		if !plain(name) {
			return
		}
		sec := append([]byte(name), 0)
		for len(sec)%4 != 0 {
			sec = append(sec, 0)
		}
		sec = binary.LittleEndian.AppendUint32(sec, crc)
		if n, c, err := parseDebugLink(sec, "fuzz", binary.LittleEndian); err != nil || n != name || c != crc {
			t.Fatalf("debuglink of %q, %#x reads back as %q, %#x, %v", name, crc, n, c, err)
		}
	})
}

// FuzzParseJITObject: a JIT object the target published through the GDB
// JIT interface is read without panics and within bounds; every function
// it yields has its name bounded, and every FDE of its relocated call
// frame information is found where its table says.
func FuzzParseJITObject(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj *JITObject
		noPanics(t, "ParseJITObject", func() {
			checkAlloc(t, "ParseJITObject", len(data), 64, func() {
				obj, _ = ParseJITObject("fuzz", data)
			})
		})
		if obj == nil {
			return
		}
		if len(obj.Funcs) > maxJITFuncs {
			t.Fatalf("%d functions, bound %d", len(obj.Funcs), maxJITFuncs)
		}
		for _, fn := range obj.Funcs {
			if len(fn.Name) > maxJITFuncName || fn.Size == 0 {
				t.Fatalf("function %q of %d bytes", fn.Name, fn.Size)
			}
			if obj.CFI != nil {
				_, _ = obj.CFI.RowAt(fn.Start)
			}
		}
	})
}
