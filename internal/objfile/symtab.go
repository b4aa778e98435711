package objfile

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
)

// symtab is a function symbol table merged from one or more ELF symbol
// sections (the binary's .dynsym, and .symtab from the binary, its debug
// file or its MiniDebugInfo). Names stay in their string tables until
// asked for: a large binary has hundreds of thousands of symbols, and a
// profile names a few hundred of them.
type symtab struct {
	syms []sym    // sorted by addr; one per address (the preferred name)
	strs [][]byte // string tables, indexed by sym.str
}

type sym struct {
	addr, size uint64
	name       uint32 // offset in strs[str]
	str        uint8
	bind       uint8 // elf.STB_*
}

// maxStringTables bounds the sources merged into one table (sym.str is a
// byte; in practice there are at most three).
const maxStringTables = 16

// addSection adds the function symbols of a SHT_SYMTAB or SHT_DYNSYM
// section. The section and its string table come from a file we do not
// trust: entries that point outside the string table are skipped, and
// nothing is allocated beyond the section's size.
func (t *symtab) addSection(f *elf.File, sec *elf.Section) (int, error) {
	if len(t.strs) >= maxStringTables {
		return 0, fmt.Errorf("too many symbol sections")
	}
	if sec.Link == 0 || int(sec.Link) >= len(f.Sections) {
		return 0, fmt.Errorf("section %s: string table index %d out of range", sec.Name, sec.Link)
	}
	data, err := sec.Data()
	if err != nil {
		return 0, fmt.Errorf("section %s at offset %#x: %w", sec.Name, sec.Offset, err)
	}
	strsec := f.Sections[sec.Link]
	if strsec.Type != elf.SHT_STRTAB {
		return 0, fmt.Errorf("section %s: linked section %s is not a string table", sec.Name, strsec.Name)
	}
	strs, err := strsec.Data()
	if err != nil {
		return 0, fmt.Errorf("section %s at offset %#x: %w", strsec.Name, strsec.Offset, err)
	}
	syms := parseSymbols(data, strs, f.Class, f.ByteOrder)
	if len(syms) == 0 {
		return 0, nil
	}
	idx := uint8(len(t.strs))
	t.strs = append(t.strs, strs)
	for i := range syms {
		syms[i].str = idx
	}
	t.syms = append(t.syms, syms...)
	return len(syms), nil
}

// parseSymbols decodes the function symbols of a symbol section.
func parseSymbols(data, strs []byte, class elf.Class, bo binary.ByteOrder) []sym {
	entsize := 24
	if class == elf.ELFCLASS32 {
		entsize = 16
	}
	n := len(data) / entsize
	out := make([]sym, 0, n) // n is bounded by the section's bytes, already read
	for i := 1; i < n; i++ { // entry 0 is the undefined symbol
		e := data[i*entsize : (i+1)*entsize]
		var s sym
		var info uint8
		var shndx uint16
		if class == elf.ELFCLASS32 {
			s.name = bo.Uint32(e[0:])
			s.addr = uint64(bo.Uint32(e[4:]))
			s.size = uint64(bo.Uint32(e[8:]))
			info, shndx = e[12], bo.Uint16(e[14:])
		} else {
			s.name = bo.Uint32(e[0:])
			info, shndx = e[4], bo.Uint16(e[6:])
			s.addr = bo.Uint64(e[8:])
			s.size = bo.Uint64(e[16:])
		}
		typ := elf.SymType(info & 0xf)
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
			continue
		}
		if shndx == uint16(elf.SHN_UNDEF) || s.addr == 0 {
			continue
		}
		if s.name == 0 || int(s.name) >= len(strs) || strs[s.name] == 0 {
			continue
		}
		s.bind = info >> 4
		out = append(out, s)
	}
	return out
}

// finish sorts the table and keeps one symbol per address: sorting by
// address alone, then choosing among the few that share one, is much
// cheaper than comparing names inside the sort.
func (t *symtab) finish() {
	slices.SortFunc(t.syms, func(a, b sym) int { return cmp.Compare(a.addr, b.addr) })
	out := t.syms[:0]
	for i := 0; i < len(t.syms); {
		best, j := i, i+1
		for ; j < len(t.syms) && t.syms[j].addr == t.syms[i].addr; j++ {
			if t.better(&t.syms[j], &t.syms[best]) {
				best = j
			}
		}
		out = append(out, t.syms[best])
		i = j
	}
	t.syms = slices.Clip(out)
}

// better says which of two names for one address a person expects: the
// public name (write) over the internal alias (__write, __libc_write), a
// global over a weak or local symbol, one with a size over one without.
func (t *symtab) better(a, b *sym) bool {
	an, bn := t.nameBytes(a), t.nameBytes(b)
	if ua, ub := leadingUnderscores(an), leadingUnderscores(bn); ua != ub {
		return ua < ub
	}
	if ra, rb := bindRank(a.bind), bindRank(b.bind); ra != rb {
		return ra > rb
	}
	if (a.size == 0) != (b.size == 0) {
		return a.size != 0
	}
	if len(an) != len(bn) {
		return len(an) < len(bn)
	}
	return string(an) < string(bn)
}

func bindRank(b uint8) int {
	switch elf.SymBind(b) {
	case elf.STB_GLOBAL:
		return 2
	case elf.STB_WEAK:
		return 1
	}
	return 0
}

func leadingUnderscores(b []byte) int {
	n := 0
	for n < len(b) && b[n] == '_' {
		n++
	}
	return n
}

// nameBytes returns a symbol's name without copying it.
func (t *symtab) nameBytes(s *sym) []byte {
	strs := t.strs[s.str]
	b := strs[s.name:]
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func (t *symtab) name(s *sym) string { return string(t.nameBytes(s)) }

// maxNestedScan bounds the walk back from an address that falls past the
// end of the nearest symbol, looking for an enclosing one (a function with
// a local label or an alias of smaller size inside it).
const maxNestedScan = 16

// lookup returns the symbol holding vaddr. A symbol without a size runs up
// to the next symbol.
func (t *symtab) lookup(vaddr uint64) (*sym, bool) {
	if t == nil {
		return nil, false
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > vaddr }) - 1
	if i < 0 {
		return nil, false
	}
	s := &t.syms[i]
	if s.size == 0 || vaddr-s.addr < s.size {
		return s, true
	}
	for j := i - 1; j >= 0 && j >= i-maxNestedScan; j-- {
		if c := &t.syms[j]; c.size != 0 && vaddr-c.addr < c.size {
			return c, true
		}
	}
	return nil, false
}

func (t *symtab) len() int {
	if t == nil {
		return 0
	}
	return len(t.syms)
}
