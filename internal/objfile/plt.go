package objfile

import (
	"debug/elf"
	"encoding/binary"
)

// PLT stubs have no symbols: without them an address in .plt is named by
// the symbol before it (_init). Each stub jumps through a GOT slot, and a
// dynamic relocation says which function the slot holds; the stub is
// named "function@plt", as perf and gdb name it.

// x86-64 relocation types (System V ABI, table 4.10).
const (
	rX8664GlobDat  = 6
	rX8664JumpSlot = 7
)

// maxPLT bounds the stubs read from one file.
const maxPLT = 1 << 20

// addPLT adds a symbol for every PLT stub of f whose GOT slot a dynamic
// relocation names; it returns how many.
func (t *symtab) addPLT(f *elf.File) int {
	if len(t.strs) >= maxStringTables || f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return 0
	}
	slots := gotSlots(f)
	if len(slots) == 0 {
		return 0
	}
	strs := []byte{0}
	idx := uint8(len(t.strs))
	n := 0
	for _, name := range []string{".plt", ".plt.sec", ".plt.got"} {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 || s.Size > maxPLT {
			continue
		}
		code, err := s.Data()
		if err != nil {
			continue
		}
		ent := s.Entsize
		if ent != 8 && ent != 16 {
			ent = 16
		}
		for off := uint64(0); off+ent <= uint64(len(code)); off += ent {
			got, ok := jumpSlot(code[off:off+ent], s.Addr+off)
			if !ok {
				continue
			}
			fn, ok := slots[got]
			if !ok || uint64(len(strs))+uint64(len(fn))+5 >= 1<<32-1 {
				continue
			}
			t.syms = append(t.syms, sym{addr: s.Addr + off, size: ent, name: uint32(len(strs)), str: idx, bind: uint8(elf.STB_LOCAL)})
			strs = append(strs, fn...)
			strs = append(strs, "@plt"...)
			strs = append(strs, 0)
			n++
		}
	}
	if n > 0 {
		t.strs = append(t.strs, strs)
	}
	return n
}

// gotSlots maps the GOT slots that dynamic relocations fill with a
// function's address (JUMP_SLOT, GLOB_DAT) to the function's name.
func gotSlots(f *elf.File) map[uint64]string {
	syms, err := f.DynamicSymbols()
	if err != nil || len(syms) == 0 {
		return nil
	}
	out := map[uint64]string{}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || s.Size > maxPLT*24 {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for i := 0; i+24 <= len(b); i += 24 {
			off := binary.LittleEndian.Uint64(b[i:])
			info := binary.LittleEndian.Uint64(b[i+8:])
			typ, si := uint32(info), info>>32
			if typ != rX8664JumpSlot && typ != rX8664GlobDat || si == 0 || si > uint64(len(syms)) {
				continue
			}
			sy := syms[si-1] // DynamicSymbols leaves out the null symbol 0
			if elf.ST_TYPE(sy.Info) != elf.STT_FUNC && elf.ST_TYPE(sy.Info) != elf.STT_GNU_IFUNC && typ == rX8664GlobDat {
				continue // a data pointer, not a function
			}
			if sy.Name != "" {
				out[off] = sy.Name
			}
		}
	}
	return out
}

// jumpSlot decodes the jump through the GOT a PLT stub at addr makes,
// "jmp *disp32(%rip)" (ff 25), optionally after endbr64 and a bnd prefix,
// and returns the slot's address.
func jumpSlot(b []byte, addr uint64) (uint64, bool) {
	i := 0
	if len(b) >= 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa { // endbr64
		i = 4
	}
	if i < len(b) && b[i] == 0xf2 { // bnd
		i++
	}
	if i+6 > len(b) || b[i] != 0xff || b[i+1] != 0x25 {
		return 0, false
	}
	next := addr + uint64(i) + 6
	return next + uint64(int64(int32(binary.LittleEndian.Uint32(b[i+2:])))), true
}
