package objfile

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
)

// GoTable is a Go binary's pclntab, the table the Go runtime itself uses
// for tracebacks: for every function its name, its entry, and pc-value
// tables giving at each pc the stack pointer's distance below its value at
// entry (pcsp), the source file (pcfile) and the line (pcln). A Go binary
// always has it, stripped or not, and has no .eh_frame for Go code: it is
// where both names and frame sizes come from. This is the one reader of
// it in stallwatch.
//
// Layouts: Go 1.2–1.15, 1.16–1.17, 1.18–1.19 and 1.20 on (runtime/symtab.go,
// internal/abi/symtab.go). Every offset read from the table is checked
// against its length: the file comes from the target.
type GoTable struct {
	name    string
	data    []byte
	bo      binary.ByteOrder
	version int    // 12, 116, 118, 120
	ptr     int    // pointer size
	quantum uint64 // instruction size quantum (1 on x86)
	// textStart is the link-time address function entries are relative
	// to (1.18 on); older tables hold absolute entries.
	textStart uint64
	nfunc     int
	functab   []byte // nfunc+1 entries
	funcData  []byte // where function offsets point
	nameTab   []byte
	pcTab     []byte
	cuTab     []byte
	fileTab   []byte
	nfile     uint64 // 1.2: entries of fileTab
	// goexit is the link-time range of runtime.goexit: every goroutine's
	// outermost frame, beyond which a stack holds stale memory.
	goexitLo, goexitHi uint64
}

// Go's pclntab magic numbers (internal/abi.PCLnTabMagic).
const (
	goMagic12  = 0xfffffffb
	goMagic116 = 0xfffffffa
	goMagic118 = 0xfffffff0
	goMagic120 = 0xfffffff1
)

// maxGoTable bounds the pclntab we read (the largest Go binaries have a
// few hundred MB of code; their tables are a fraction of that).
const maxGoTable = 512 << 20

// goTableOf reads the file's .gopclntab; nil (no error) for a file that
// has none.
func (f *File) goTableOf() (*GoTable, error) {
	s := f.ef.Section(".gopclntab")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Size > maxGoTable || s.Size > uint64(f.size) || s.Offset > uint64(f.size)-s.Size {
		return nil, fmt.Errorf("%s: .gopclntab at offset %#x size %#x is outside the file (%d bytes)", f.Name, s.Offset, s.Size, f.size)
	}
	data := make([]byte, s.Size)
	if _, err := f.r.ReadAt(data, int64(s.Offset)); err != nil {
		return nil, fmt.Errorf("%s: read .gopclntab at offset %#x: %w", f.Name, s.Offset, err)
	}
	// Function entries are relative to the start of .text (runtime.text)
	// where the header's textStart is filled in at run time.
	var text uint64
	if t := f.ef.Section(".text"); t != nil {
		text = t.Addr
	}
	return ParseGoTable(data, text, f.Name)
}

// ParseGoTable parses a pclntab whose functions are relative to the
// link-time address text (1.18 on, when the header's own is zero). It
// returns nil and no error for bytes that are not a pclntab of a layout
// it knows.
func ParseGoTable(data []byte, text uint64, name string) (*GoTable, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: .gopclntab: "+format, append([]any{name}, args...)...)
	}
	if len(data) < 16 {
		return nil, nil
	}
	g := &GoTable{name: name, data: data, bo: binary.LittleEndian}
	magic := g.bo.Uint32(data)
	if magic&0xfffffff0 != 0xfffffff0 {
		g.bo = binary.BigEndian
		magic = g.bo.Uint32(data)
	}
	switch magic {
	case goMagic12:
		g.version = 12
	case goMagic116:
		g.version = 116
	case goMagic118:
		g.version = 118
	case goMagic120:
		g.version = 120
	default:
		return nil, nil
	}
	g.ptr, g.quantum = int(data[7]), uint64(data[6])
	if data[4] != 0 || data[5] != 0 || (g.ptr != 4 && g.ptr != 8) {
		return nil, bad("header %x is not a pclntab's", data[:8])
	}
	if g.quantum == 0 {
		return nil, bad("instruction quantum 0")
	}
	word := func(i int) (uint64, error) {
		off := 8 + i*g.ptr
		if off+g.ptr > len(data) {
			return 0, bad("header word %d past the end", i)
		}
		return g.uintptr(data[off:]), nil
	}
	region := func(i int, what string) ([]byte, error) {
		off, err := word(i)
		if err != nil {
			return nil, err
		}
		if off > uint64(len(data)) {
			return nil, bad("%s offset %#x beyond its %d bytes", what, off, len(data))
		}
		return data[off:], nil
	}
	nfunc, err := word(0)
	if err != nil {
		return nil, err
	}
	var first int // header word of the function name table
	switch g.version {
	case 12:
		g.funcData, g.nameTab, g.pcTab = data, data, data
		g.functab = data[min(len(data), 8+g.ptr):]
	case 116:
		first = 2
	default:
		first = 3
		if g.textStart, err = word(2); err != nil {
			return nil, err
		}
		if g.textStart == 0 {
			g.textStart = text
		}
	}
	if g.version >= 116 {
		tabs := []*[]byte{&g.nameTab, &g.cuTab, &g.fileTab, &g.pcTab, &g.funcData}
		for i, what := range []string{"function name table", "compilation unit table", "file table", "pc table", "function table"} {
			if *tabs[i], err = region(first+i, what); err != nil {
				return nil, err
			}
		}
		g.functab = g.funcData
	}
	field := g.functabField()
	if nfunc > uint64(len(g.functab))/uint64(2*field) || len(g.functab) < (2*int(nfunc)+1)*field {
		return nil, bad("%d functions do not fit in %d bytes", nfunc, len(g.functab))
	}
	g.nfunc = int(nfunc)
	end := (2*g.nfunc + 1) * field
	if g.version == 12 {
		// The file table's offset follows the function table.
		if end+4 > len(g.functab) {
			return nil, bad("file table offset past the end")
		}
		fileOff := uint64(g.bo.Uint32(g.functab[end:]))
		if fileOff+4 > uint64(len(data)) {
			return nil, bad("file table at %#x beyond its %d bytes", fileOff, len(data))
		}
		g.fileTab = data[fileOff:]
		g.nfile = uint64(g.bo.Uint32(g.fileTab))
		if g.nfile > uint64(len(g.fileTab))/4 {
			return nil, bad("%d files do not fit in %d bytes", g.nfile, len(g.fileTab))
		}
	}
	g.functab = g.functab[:end]
	g.goexitLo, g.goexitHi = g.findFunc("runtime.goexit")
	return g, nil
}

func (g *GoTable) uintptr(b []byte) uint64 {
	if g.ptr == 4 {
		return uint64(g.bo.Uint32(b))
	}
	return g.bo.Uint64(b)
}

// functabField is the size of one field of the function table: a pointer
// up to Go 1.17, a 32-bit offset from 1.18.
func (g *GoTable) functabField() int {
	if g.version >= 118 {
		return 4
	}
	return g.ptr
}

// entry is the link-time entry of function i (i == nfunc: the end of text).
func (g *GoTable) entry(i int) uint64 {
	sz := g.functabField()
	b := g.functab[2*i*sz:]
	if g.version >= 118 {
		return g.textStart + uint64(g.bo.Uint32(b))
	}
	return g.uintptr(b)
}

// Funcs is the number of functions in the table.
func (g *GoTable) Funcs() int { return g.nfunc }

// goFunc is one _func record.
type goFunc struct {
	g *GoTable
	b []byte
	i int // index in the function table
}

// funcAt returns the _func record of function i.
func (g *GoTable) funcAt(i int) (goFunc, bool) {
	sz := g.functabField()
	off := g.uintptrOrU32(g.functab[(2*i+1)*sz:])
	// The fixed part: the entry, then nine 32-bit fields (to startLine)
	// and four bytes (funcID, flag, _, nfuncdata).
	need := uint64(g.entrySize()) + 9*4 + 4
	if off > uint64(len(g.funcData)) || need > uint64(len(g.funcData))-off {
		return goFunc{}, false
	}
	return goFunc{g: g, b: g.funcData[off:], i: i}, true
}

func (g *GoTable) uintptrOrU32(b []byte) uint64 {
	if g.version >= 118 {
		return uint64(g.bo.Uint32(b))
	}
	return g.uintptr(b)
}

// entrySize is the size of _func's first field, the entry.
func (g *GoTable) entrySize() int {
	if g.version >= 118 {
		return 4
	}
	return g.ptr
}

// field returns the n-th 32-bit field after the entry (1: nameOff, 2:
// args, 3: deferreturn, 4: pcsp, 5: pcfile, 6: pcln, 7: npcdata, 8:
// cuOffset, 9: startLine).
func (f goFunc) field(n int) uint32 {
	return f.g.bo.Uint32(f.b[f.g.entrySize()+(n-1)*4:])
}

// flags returns the function's flags (internal/abi.FuncFlag), 0 before Go
// 1.18 which has none where it is read.
func (f goFunc) flags() uint8 {
	switch f.g.version {
	case 118:
		return f.b[f.g.entrySize()+8*4+1]
	case 120:
		return f.b[f.g.entrySize()+9*4+1]
	}
	return 0
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

// maxGoName bounds a function name read from the table.
const maxGoName = 4096

// name returns the function's name.
func (f goFunc) name() string {
	return cstring(f.g.nameTab, uint64(f.field(1)), maxGoName)
}

// cstring returns the NUL-terminated string at off in b, "" when it is
// out of range, unterminated or longer than limit.
func cstring(b []byte, off uint64, limit int) string {
	if off >= uint64(len(b)) {
		return ""
	}
	b = b[off:]
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
		if i >= limit {
			break
		}
	}
	return ""
}

// findFunc returns the link-time range of the named function, or zeros.
func (g *GoTable) findFunc(name string) (lo, hi uint64) {
	for i := 0; i < g.nfunc; i++ {
		f, ok := g.funcAt(i)
		if !ok {
			continue
		}
		if n := f.name(); n == name || n == name+".abi0" {
			return g.entry(i), g.entry(i + 1)
		}
	}
	return 0, 0
}

// funcFor finds the function holding link-time pc.
func (g *GoTable) funcFor(pc uint64) (goFunc, bool) {
	if g.nfunc == 0 || pc < g.entry(0) || pc >= g.entry(g.nfunc) {
		return goFunc{}, false
	}
	i := sort.Search(g.nfunc, func(i int) bool { return g.entry(i+1) > pc })
	if i >= g.nfunc {
		return goFunc{}, false
	}
	return g.funcAt(i)
}

// pcValue decodes a pc-value table (runtime/symtab.go, pcvalue) starting
// at off in the pc table: pairs of a zig-zag value delta and a pc delta,
// both varints, from the function's entry on.
func (g *GoTable) pcValue(off uint32, entry, target uint64) (int64, bool) {
	if off == 0 || uint64(off) >= uint64(len(g.pcTab)) {
		return 0, false
	}
	tab := g.pcTab[off:]
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
		pc += pcdelta * g.quantum
		if target < pc {
			return val, true
		}
	}
}

// SPDelta returns, for link-time pc, how far SP is below its value at the
// function's entry, and the function's flags.
func (g *GoTable) SPDelta(pc uint64) (delta uint64, ok bool) {
	f, ok := g.funcFor(pc)
	if !ok {
		return 0, false
	}
	v, ok := g.pcValue(f.field(4), g.entry(f.i), pc)
	if !ok || v < 0 || v > 1<<30 {
		return 0, false
	}
	return uint64(v), true
}

// GoFrameKind says how a walk treats a Go function.
type GoFrameKind uint8

const (
	// GoNormal: a function whose caller its frame size finds.
	GoNormal GoFrameKind = iota
	// GoOutermost: a stack's first function (goexit, mstart, rt0_go):
	// nothing called it.
	GoOutermost
	// GoStackSwitch: the function writes SP itself (mcall, systemstack):
	// its caller is on another stack only the scheduler's records say.
	GoStackSwitch
)

// FrameKind says whether the function at link-time pc ends a walk.
func (g *GoTable) FrameKind(pc uint64) GoFrameKind {
	if g.goexitHi > g.goexitLo && pc >= g.goexitLo && pc < g.goexitHi {
		return GoOutermost
	}
	f, ok := g.funcFor(pc)
	if !ok {
		return GoNormal
	}
	switch fl := f.flags(); {
	case fl&goTopFrame != 0:
		return GoOutermost
	case fl&goSPWrite != 0:
		return GoStackSwitch
	}
	return GoNormal
}

// Line returns the function, file and line at link-time pc.
func (g *GoTable) Line(pc uint64) (fn, file string, line int64, ok bool) {
	f, ok := g.funcFor(pc)
	if !ok {
		return "", "", 0, false
	}
	entry := g.entry(f.i)
	fn = f.name()
	if v, ok := g.pcValue(f.field(6), entry, pc); ok && v > 0 {
		line = v
	}
	if fno, ok := g.pcValue(f.field(5), entry, pc); ok {
		file = g.fileName(f, fno)
	}
	return fn, file, line, fn != ""
}

// fileName returns the name of file number fno of function f.
func (g *GoTable) fileName(f goFunc, fno int64) string {
	if fno < 0 {
		return ""
	}
	if g.version == 12 {
		if fno == 0 || uint64(fno) >= g.nfile {
			return ""
		}
		return cstring(g.data, uint64(g.bo.Uint32(g.fileTab[4*fno:])), maxGoName)
	}
	i := (uint64(f.field(8)) + uint64(fno)) * 4
	if i+4 > uint64(len(g.cuTab)) {
		return ""
	}
	off := g.bo.Uint32(g.cuTab[i:])
	if off == ^uint32(0) {
		return ""
	}
	return cstring(g.fileTab, uint64(off), maxGoName)
}

// addTo adds the Go functions to a symbol table, for binaries whose
// .symtab was stripped.
func (g *GoTable) addTo(t *symtab) int {
	if len(t.strs) >= maxStringTables || g.nfunc == 0 {
		return 0
	}
	strs := []byte{0}
	idx := uint8(len(t.strs))
	n := 0
	for i := 0; i < g.nfunc; i++ {
		f, ok := g.funcAt(i)
		if !ok {
			continue
		}
		lo, hi := g.entry(i), g.entry(i+1)
		name := f.name()
		if hi <= lo || name == "" || uint64(len(strs))+uint64(len(name)) >= 1<<32-1 {
			continue
		}
		t.syms = append(t.syms, sym{addr: lo, size: hi - lo, name: uint32(len(strs)), str: idx, bind: 1})
		strs = append(strs, name...)
		strs = append(strs, 0)
		n++
	}
	t.strs = append(t.strs, strs)
	return n
}

func (g *GoTable) sizeBytes() int64 { return int64(len(g.data)) }

// frames names link-time pc for the line source interface.
func (g *GoTable) frames(pc uint64) ([]Frame, error) {
	fn, file, line, ok := g.Line(pc)
	if !ok {
		return nil, nil
	}
	return []Frame{{Func: fn, File: file, Line: line}}, nil
}

// FuncRange returns the link-time range of the named function (or of its
// ABI0 form, name.abi0), zeros when the table has none.
func (g *GoTable) FuncRange(name string) (lo, hi uint64) { return g.findFunc(name) }

// FuncBounds returns the link-time range of the function holding pc.
func (g *GoTable) FuncBounds(pc uint64) (lo, hi uint64, ok bool) {
	f, ok := g.funcFor(pc)
	if !ok {
		return 0, 0, false
	}
	return g.entry(f.i), g.entry(f.i + 1), true
}
