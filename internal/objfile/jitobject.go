package objfile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/stallwatch/stallwatch/internal/callframe"
)

// JITObject is an object file a JIT compiled and published in the target's
// memory through the GDB JIT interface (LLVM's MCJIT and ORC do, for Julia,
// PostgreSQL's llvmjit, lli): a relocatable ELF file whose sections' header
// addresses were set to where the JIT loaded them, and whose contents were
// not relocated. Its function symbols and its .eh_frame, relocated here
// against those addresses, give the names and the call frame information
// of the code it loaded, in run-time addresses.
type JITObject struct {
	Funcs []JITFunc
	// CFI is the .eh_frame's call frame information, nil when it has
	// none (or it does not parse: Problem says why); EhFrame is that
	// section relocated, loaded at EhFrameAddr.
	CFI         *callframe.Table
	EhFrame     []byte
	EhFrameAddr uint64
	Problem     string
}

// JITFunc is a function of a JITObject: its name and run-time range.
type JITFunc struct {
	Name        string
	Start, Size uint64
}

// Bounds on what one JIT object may hold.
const (
	maxJITObject   = 64 << 20
	maxJITFuncs    = 1 << 16
	maxJITFuncName = 4096
)

// ParseJITObject reads a JIT object's bytes (name says where they came
// from, for errors). The bytes come from the target: every offset, index
// and size is checked, and a panic in the ELF parser becomes an error.
func ParseJITObject(name string, b []byte) (*JITObject, error) {
	if len(b) > maxJITObject {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a JIT object may have", name, len(b), maxJITObject)
	}
	if err := checkHeaderTables(bytes.NewReader(b), int64(len(b))); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var obj *JITObject
	err := safely(name, func() error {
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if ef.Machine != elf.EM_X86_64 || ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB {
			return fmt.Errorf("%s: %s %s %s is not x86-64", name, ef.Class, ef.Data, ef.Machine)
		}
		obj, err = parseJITObject(name, ef)
		return err
	})
	return obj, err
}

func parseJITObject(name string, ef *elf.File) (*JITObject, error) {
	syms, err := jitSymbols(ef)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	obj := &JITObject{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Name == "" {
			continue
		}
		start, ok := symbolAddr(ef, s)
		if !ok {
			continue
		}
		if len(obj.Funcs) == maxJITFuncs {
			break
		}
		obj.Funcs = append(obj.Funcs, JITFunc{Name: truncateName(s.Name), Start: start, Size: s.Size})
	}
	eh := ef.Section(".eh_frame")
	if eh == nil || eh.Type == elf.SHT_NOBITS || eh.Size == 0 {
		return obj, nil
	}
	data, err := eh.Data()
	if err != nil {
		obj.Problem = fmt.Sprintf("%s: .eh_frame at offset %#x: %v", name, eh.Offset, err)
		return obj, nil
	}
	if err := relocate(ef, eh, data, syms); err != nil {
		obj.Problem = fmt.Sprintf("%s: .eh_frame: %v", name, err)
		return obj, nil
	}
	cfi, err := callframe.ParseEhFrame(name+" .eh_frame", data, eh.Addr)
	if err != nil {
		obj.Problem = err.Error()
		return obj, nil
	}
	obj.CFI, obj.EhFrame, obj.EhFrameAddr = cfi, data, eh.Addr
	return obj, nil
}

// jitSymbols is the object's .symtab (a JIT object has no .dynsym); none
// is no error.
func jitSymbols(ef *elf.File) ([]elf.Symbol, error) {
	syms, err := ef.Symbols()
	if err == elf.ErrNoSymbols {
		return nil, nil
	}
	return syms, err
}

// symbolAddr is where a symbol was loaded: in a relocatable object its
// value is an offset in its section, whose header says where the JIT put
// it; in an executable one it is the address itself.
func symbolAddr(ef *elf.File, s elf.Symbol) (uint64, bool) {
	if s.Section == elf.SHN_ABS {
		return s.Value, true
	}
	if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || int(s.Section) >= len(ef.Sections) {
		return 0, false
	}
	if ef.Type != elf.ET_REL {
		return s.Value, true
	}
	sec := ef.Sections[s.Section]
	if sec.Addr == 0 || s.Value > sec.Size {
		return 0, false // a section the JIT did not load
	}
	return sec.Addr + s.Value, true
}

func truncateName(s string) string {
	if len(s) > maxJITFuncName {
		return s[:maxJITFuncName]
	}
	return s
}

// relocate applies the relocations of target (its SHT_RELA sections) to
// data, its contents, at the addresses the section headers give: what
// the JIT did to the code it loaded, done again on the copy it published.
// Only the relocations call frame information uses are known (absolute
// and PC-relative, 32 and 64 bits); a relocation against a symbol nobody
// loaded is an error, as is one outside the section.
func relocate(ef *elf.File, target *elf.Section, data []byte, syms []elf.Symbol) error {
	if ef.Type != elf.ET_REL {
		return nil
	}
	idx := -1
	for i, s := range ef.Sections {
		if s == target {
			idx = i
		}
	}
	for _, rs := range ef.Sections {
		if rs.Type != elf.SHT_RELA || int(rs.Info) != idx {
			continue
		}
		rels, err := rs.Data()
		if err != nil {
			return fmt.Errorf("%s at offset %#x: %w", rs.Name, rs.Offset, err)
		}
		for off := 0; off+24 <= len(rels); off += 24 {
			r := rels[off:]
			at := binary.LittleEndian.Uint64(r)
			info := binary.LittleEndian.Uint64(r[8:])
			addend := int64(binary.LittleEndian.Uint64(r[16:]))
			si, typ := elf.R_SYM64(info), elf.R_X86_64(elf.R_TYPE64(info))
			if si == 0 || int(si) > len(syms) {
				return fmt.Errorf("%s: relocation %d: symbol %d of %d", rs.Name, off/24, si, len(syms))
			}
			sym, ok := symbolAddr(ef, syms[si-1]) // ef.Symbols leaves out entry 0
			if !ok {
				return fmt.Errorf("%s: relocation %d: symbol %q is not loaded", rs.Name, off/24, syms[si-1].Name)
			}
			v := sym + uint64(addend)
			pc := target.Addr + at
			switch typ {
			case elf.R_X86_64_64:
				err = put(data, at, 8, v)
			case elf.R_X86_64_PC64:
				err = put(data, at, 8, v-pc)
			case elf.R_X86_64_PC32:
				d := int64(v - pc)
				if d != int64(int32(d)) {
					return fmt.Errorf("%s: relocation %d: %#x from %#x does not fit 32 bits", rs.Name, off/24, v, pc)
				}
				err = put(data, at, 4, uint64(d))
			case elf.R_X86_64_32, elf.R_X86_64_32S:
				err = put(data, at, 4, v)
			case elf.R_X86_64_NONE:
			default:
				return fmt.Errorf("%s: relocation %d: type %s not known", rs.Name, off/24, typ)
			}
			if err != nil {
				return fmt.Errorf("%s: relocation %d: %w", rs.Name, off/24, err)
			}
		}
	}
	return nil
}

// put writes the n low bytes of v at offset at of data.
func put(data []byte, at uint64, n int, v uint64) error {
	if at > uint64(len(data)) || uint64(n) > uint64(len(data))-at {
		return fmt.Errorf("offset %#x outside the section's %d bytes", at, len(data))
	}
	if n == 8 {
		binary.LittleEndian.PutUint64(data[at:], v)
	} else {
		binary.LittleEndian.PutUint32(data[at:], uint32(v))
	}
	return nil
}

// SymbolValue returns the link-time value of the named symbol in the
// file's .dynsym, else its .symtab, of any type (a variable's address,
// such as the GDB JIT interface's __jit_debug_descriptor); ok is false
// when neither has it.
func (f *File) SymbolValue(name string) (uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.readable() {
		return 0, false, ErrClosed
	}
	for _, typ := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
		sec := f.symbolSection(typ)
		if sec == nil {
			continue
		}
		v, found, err := f.symbolValue(sec, name)
		if found || err != nil {
			return v, found, err
		}
	}
	return 0, false, nil
}

// symbolValue looks for a defined symbol named name in one symbol section.
func (f *File) symbolValue(sec *elf.Section, name string) (uint64, bool, error) {
	if sec.Link == 0 || int(sec.Link) >= len(f.ef.Sections) {
		return 0, false, fmt.Errorf("%s: section %s: string table index %d out of range", f.Name, sec.Name, sec.Link)
	}
	data, err := f.section(sec.Name)
	if err != nil {
		return 0, false, err
	}
	strs, err := f.sectionData(f.ef.Sections[sec.Link])
	if err != nil {
		return 0, false, err
	}
	want := []byte(name)
	for i := 1; i < len(data)/symEntSize(f.ef.Class); i++ {
		e := readSymEntry(data, i, f.ef.Class, f.ef.ByteOrder)
		if e.shndx == uint16(elf.SHN_UNDEF) {
			continue
		}
		if raw, ok := cString(strs, e.name); ok && bytes.Equal(raw, want) {
			return e.addr, true, nil
		}
	}
	return 0, false, nil
}
