package symbolize

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The parsers below read files the target controls. Each fuzz target
// checks that bad input gives an error or an unnamed address: no panic,
// no unbounded allocation, no hang.

// fuzzProcess is a Process with no debug directories, for parsing files
// that are not mapped anywhere.
func fuzzProcess() *Process {
	return &Process{pid: os.Getpid(), sameRoot: true, debugDirs: []string{}, objs: map[fileID]*objEntry{}}
}

// exerciseELF opens an image and looks up addresses around its symbols
// and segments.
func exerciseELF(data []byte) {
	o, err := memObjFile("/nonexistent/fuzz", "fuzz", data)
	if err != nil {
		return
	}
	p := fuzzProcess()
	p.loadSymbols(o)
	addrs := []uint64{0, 1, 0x1000, ^uint64(0)}
	for i := range o.loads {
		l := o.loads[i]
		addrs = append(addrs, l.Vaddr, l.Vaddr+l.Filesz/2)
		o.bias(0x7f0000000000+l.Off, l.Off, l.Flags&elf.PF_X != 0)
	}
	if o.syms != nil {
		for i, s := range o.syms.syms {
			if i > 64 {
				break
			}
			addrs = append(addrs, s.addr, s.addr+s.size/2)
		}
	}
	for _, a := range addrs {
		p.nativeLines(o, a)
	}
	o.close()
}

func FuzzELF(f *testing.F) {
	// Small images only: the fuzzer minimizes what it finds, and an
	// image of 20 KB takes it longer than a fuzzing run lasts. DWARF has
	// its own target, on sections cut from a real program.
	if v, err := ownVDSO(); err == nil {
		b := make([]byte, v.size)
		if _, err := v.r.ReadAt(b, 0); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exerciseELF(data)
	})
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
		out, err := inflateXZ(data)
		if err == nil && len(out) > maxMiniDebugInfo {
			t.Fatalf("inflated %d bytes, limit %d", len(out), maxMiniDebugInfo)
		}
	})
}

func FuzzPclntab(f *testing.F) {
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
	f.Add([]byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if checkPclntab(data) != nil {
			return
		}
		g := &goTable{name: "fuzz"}
		err := safely("fuzz", func() error {
			t, err := newGoSymTable(data, 0x401000)
			g.t = t
			return err
		})
		if err != nil || g.t == nil {
			return
		}
		for _, pc := range []uint64{0, 0x401000, 0x401001, 0x500000} {
			g.frames(pc)
		}
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
