package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
)

// goTable is the frame information of a Go binary, read from its pclntab:
// for every function, how far the stack pointer is below its value at
// entry at each pc (the "pcsp" table). It is what Go's own traceback
// unwinds with, and a Go binary always has it, stripped or not, while it
// has no .eh_frame. With it, a Go frame is unwound exactly from the stack
// pointer alone, which matters where the frame pointer is unknown (a
// thread read without stopping it) or was not yet pushed (a frameless leaf).
//
// The layout is that of Go 1.18 and later (runtime/symtab.go, moduledata
// and _func); older binaries are left to frame pointers.
type goTable struct {
	name      string
	data      []byte
	minLC     uint64 // instruction size quantum (1 on x86)
	textStart uint64 // link-time address function entries are relative to
	funcTab   []byte // nfunc+1 entries of (entryOff, funcOff uint32)
	nfunc     int
	funcData  []byte // where funcOff points (pclnOffset)
	pcTab     []byte
	nameTab   []byte
	go120     bool // _func has startLine
	// goexit is the link-time range of runtime.goexit: every goroutine's
	// outermost frame, beyond which a stack holds stale memory.
	goexitLo, goexitHi uint64
}

// Go's pclntab magic numbers (runtime/symtab.go).
const (
	goMagic118 = 0xfffffff0
	goMagic120 = 0xfffffff1
)

// maxGoTable bounds the pclntab we read (the largest Go binaries have a
// few hundred MB of code; their tables are a fraction of that).
const maxGoTable = 512 << 20

// readGoTable returns the frame information of a Go binary, nil (no
// error) for a file that is not one or uses an older layout.
func readGoTable(ef *elf.File, r io.ReaderAt, size int64, name string) (*goTable, error) {
	s := ef.Section(".gopclntab")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Size > maxGoTable || int64(s.Offset)+int64(s.Size) > size || int64(s.Offset) < 0 {
		return nil, fmt.Errorf("%s: .gopclntab at offset %#x size %#x is outside the file (%d bytes)", name, s.Offset, s.Size, size)
	}
	data := make([]byte, s.Size)
	if _, err := r.ReadAt(data, int64(s.Offset)); err != nil {
		return nil, fmt.Errorf("%s: read .gopclntab: %w", name, err)
	}
	// The header's textStart is filled in at run time; function entries
	// are relative to the start of .text (runtime.text).
	var text uint64
	if t := ef.Section(".text"); t != nil {
		text = t.Addr
	}
	return parseGoTable(data, text, name)
}

// parseGoTable parses a pclntab. Every offset in it is checked against
// its length: the file comes from the target.
func parseGoTable(data []byte, text uint64, name string) (*goTable, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: .gopclntab: "+format, append([]any{name}, args...)...)
	}
	if len(data) < 8+8*8 {
		return nil, nil
	}
	le := binary.LittleEndian
	magic := le.Uint32(data)
	if magic != goMagic118 && magic != goMagic120 {
		return nil, nil // Go 1.17 or older, or big-endian: frame pointers it is
	}
	if data[4] != 0 || data[5] != 0 || data[7] != 8 {
		return nil, bad("header %x is not that of a 64-bit binary", data[:8])
	}
	g := &goTable{name: name, data: data, minLC: uint64(data[6]), go120: magic == goMagic120}
	if g.minLC == 0 {
		return nil, bad("instruction quantum 0")
	}
	word := func(i int) uint64 { return le.Uint64(data[8+8*i:]) }
	nfunc := word(0)
	if g.textStart = word(2); g.textStart == 0 {
		g.textStart = text
	}
	section := func(i int, what string) ([]byte, error) {
		off := word(i)
		if off > uint64(len(data)) {
			return nil, bad("%s offset %#x beyond its %d bytes", what, off, len(data))
		}
		return data[off:], nil
	}
	var err error
	if g.nameTab, err = section(3, "function name table"); err != nil {
		return nil, err
	}
	if g.pcTab, err = section(6, "pc table"); err != nil {
		return nil, err
	}
	if g.funcData, err = section(7, "function table"); err != nil {
		return nil, err
	}
	if nfunc > uint64(len(g.funcData))/8-1 || len(g.funcData) < 8 {
		return nil, bad("%d functions do not fit in %d bytes", nfunc, len(g.funcData))
	}
	g.nfunc = int(nfunc)
	g.funcTab = g.funcData[:(g.nfunc+1)*8]
	g.goexitLo, g.goexitHi = g.findFunc("runtime.goexit")
	return g, nil
}

func (g *goTable) entry(i int) uint64 {
	return g.textStart + uint64(binary.LittleEndian.Uint32(g.funcTab[8*i:]))
}

// findFunc returns the link-time range of the named function, or zeros.
func (g *goTable) findFunc(name string) (lo, hi uint64) {
	for i := 0; i < g.nfunc; i++ {
		f, ok := g.funcAt(i)
		if !ok {
			continue
		}
		if n := g.funcName(f); n == name || n == name+".abi0" {
			return g.entry(i), g.entry(i + 1)
		}
	}
	return 0, 0
}

// funcAt returns the _func record of function i.
func (g *goTable) funcAt(i int) ([]byte, bool) {
	off := uint64(binary.LittleEndian.Uint32(g.funcTab[8*i+4:]))
	// entryOff, nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata,
	// cuOffset [, startLine], funcID, flag, _, nfuncdata.
	const minFunc = 4 * 11
	if off+minFunc > uint64(len(g.funcData)) {
		return nil, false
	}
	return g.funcData[off:], true
}

func (g *goTable) funcName(f []byte) string {
	off := uint64(binary.LittleEndian.Uint32(f[4:]))
	if off >= uint64(len(g.nameTab)) {
		return ""
	}
	b := g.nameTab[off:]
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
		if i > 1024 {
			break
		}
	}
	return ""
}

// Function flags (internal/abi.FuncFlag).
const (
	// goTopFrame: the outermost frame of a stack (goexit, mstart,
	// rt0_go); nothing called it.
	goTopFrame = 1 << 0
	// goSPWrite: the function writes SP itself (mcall, systemstack,
	// morestack, gogo: stack switches); its caller cannot be found from
	// its frame size. Go's own traceback stops there too.
	goSPWrite = 1 << 1
)

// funcFlags returns the flags of the function at link-time pc.
func (g *goTable) funcFlags(pc uint64) uint8 {
	_, f, ok := g.funcFor(pc)
	if !ok {
		return 0
	}
	off := 37 // funcID, flag after cuOffset (Go 1.18, 1.19)
	if g.go120 {
		off = 41 // after startLine
	}
	return f[off]
}

// funcFor finds the function holding link-time pc.
func (g *goTable) funcFor(pc uint64) (int, []byte, bool) {
	if g.nfunc == 0 || pc < g.entry(0) || pc >= g.entry(g.nfunc) {
		return 0, nil, false
	}
	i := sort.Search(g.nfunc, func(i int) bool { return g.entry(i+1) > pc })
	if i >= g.nfunc {
		return 0, nil, false
	}
	f, ok := g.funcAt(i)
	return i, f, ok
}

// spDelta returns, for link-time pc, how far SP is below its value at the
// function's entry, and the function's entry.
func (g *goTable) spDelta(pc uint64) (delta, entry uint64, ok bool) {
	i, f, ok := g.funcFor(pc)
	if !ok {
		return 0, 0, false
	}
	entry = g.entry(i)
	pcsp := uint64(binary.LittleEndian.Uint32(f[16:]))
	if pcsp == 0 || pcsp >= uint64(len(g.pcTab)) {
		return 0, 0, false
	}
	v, ok := g.pcValue(g.pcTab[pcsp:], entry, pc)
	if !ok || v < 0 || v > 1<<30 {
		return 0, 0, false
	}
	return uint64(v), entry, true
}

// pcValue decodes a pc-value table (runtime/symtab.go, pcvalue): pairs of
// a zig-zag value delta and a pc delta, both varints, from the entry on.
func (g *goTable) pcValue(tab []byte, entry, target uint64) (int64, bool) {
	val := int64(-1)
	pc := entry
	for first := true; ; first = false {
		uvdelta, n := binary.Uvarint(tab)
		if n <= 0 || uvdelta == 0 && !first {
			return 0, false
		}
		tab = tab[n:]
		val += int64(uvdelta>>1) ^ -int64(uvdelta&1)
		pcdelta, n := binary.Uvarint(tab)
		if n <= 0 {
			return 0, false
		}
		tab = tab[n:]
		pc += pcdelta * g.minLC
		if target < pc {
			return val, true
		}
	}
}

// isGoexit reports whether link-time pc is in runtime.goexit.
func (g *goTable) isGoexit(pc uint64) bool {
	return g.goexitHi > g.goexitLo && pc >= g.goexitLo && pc < g.goexitHi
}
