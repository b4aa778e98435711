package symbolize

import (
	"debug/gosym"
	"encoding/binary"
	"fmt"
)

// goTable names functions and lines of a Go binary from its pclntab, the
// table the Go runtime itself uses for tracebacks: it is there even when
// the binary was built with -ldflags=-s -w (no symbols, no DWARF).
type goTable struct {
	name string
	t    *gosym.Table
	size int64
}

func (g *goTable) sizeBytes() int64 { return g.size }

// openGoTable reads .gopclntab, after checking that its header's counts
// fit in the section (debug/gosym allocates from them).
func (o *objFile) openGoTable() (*goTable, error) {
	pcln, err := o.section(".gopclntab")
	if err != nil || pcln == nil {
		return nil, err
	}
	if err := checkPclntab(pcln); err != nil {
		return nil, fmt.Errorf("%s: .gopclntab: %w", o.name, err)
	}
	var textStart uint64
	if s := o.ef.Section(".text"); s != nil {
		textStart = s.Addr
	}
	g := &goTable{name: o.name, size: int64(len(pcln)) * 2}
	err = safely(o.name, func() error {
		t, err := newGoSymTable(pcln, textStart)
		if err != nil {
			return fmt.Errorf("%s: .gopclntab: %w", o.name, err)
		}
		g.t = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// newGoSymTable parses a pclntab that checkPclntab accepted.
func newGoSymTable(pcln []byte, textStart uint64) (*gosym.Table, error) {
	return gosym.NewTable(nil, gosym.NewLineTable(pcln, textStart))
}

// checkPclntab checks the pclntab header (Go 1.2, 1.16, 1.18 and 1.20
// layouts) against the section's size.
func checkPclntab(b []byte) error {
	if len(b) < 16 {
		return fmt.Errorf("%d bytes: too short", len(b))
	}
	var bo binary.ByteOrder = binary.LittleEndian
	magic := bo.Uint32(b)
	if magic&0xfffffff0 != 0xfffffff0 {
		bo = binary.BigEndian
		magic = bo.Uint32(b)
	}
	ps := int(b[7])
	if b[4] != 0 || b[5] != 0 || (ps != 4 && ps != 8) {
		return fmt.Errorf("bad header")
	}
	word := func(i int) (uint64, error) {
		off := 8 + i*ps
		if off+ps > len(b) {
			return 0, fmt.Errorf("header word %d past the end", i)
		}
		if ps == 4 {
			return uint64(bo.Uint32(b[off:])), nil
		}
		return bo.Uint64(b[off:]), nil
	}
	nfunc, err := word(0)
	if err != nil {
		return err
	}
	var tabOff, entry uint64
	switch magic {
	case 0xfffffffb: // Go 1.2
		tabOff, entry = uint64(8+ps), uint64(ps)
	case 0xfffffffa: // Go 1.16
		if tabOff, err = word(6); err != nil {
			return err
		}
		entry = uint64(ps)
	case 0xfffffff0, 0xfffffff1: // Go 1.18, 1.20
		if tabOff, err = word(7); err != nil {
			return err
		}
		entry = 4
	default:
		return fmt.Errorf("unknown magic %#x", magic)
	}
	if nfiles, err := word(1); err == nil && magic != 0xfffffffb && nfiles > uint64(len(b)) {
		return fmt.Errorf("header claims %d files in %d bytes", nfiles, len(b))
	}
	if nfunc > uint64(len(b)) || tabOff > uint64(len(b)) || (2*nfunc+1)*entry > uint64(len(b))-tabOff {
		return fmt.Errorf("header claims %d functions, the table holds %d bytes", nfunc, len(b))
	}
	return nil
}

func (g *goTable) frames(vaddr uint64) (out []frame, err error) {
	err = safely(g.name, func() error {
		file, line, fn := g.t.PCToLine(vaddr)
		if fn != nil {
			out = []frame{{fn: fn.Name, file: file, line: int64(line)}}
		}
		return nil
	})
	return out, err
}

// addTo adds the Go functions to a symbol table, for binaries whose
// .symtab was stripped.
func (g *goTable) addTo(t *symtab) int {
	if len(t.strs) >= maxStringTables || len(g.t.Funcs) == 0 {
		return 0
	}
	var strs []byte
	strs = append(strs, 0)
	idx := uint8(len(t.strs))
	for _, f := range g.t.Funcs {
		if f.End <= f.Entry || uint64(len(strs))+uint64(len(f.Name)) >= 1<<32-1 {
			continue
		}
		t.syms = append(t.syms, sym{addr: f.Entry, size: f.End - f.Entry, name: uint32(len(strs)), str: idx, bind: 1})
		strs = append(strs, f.Name...)
		strs = append(strs, 0)
	}
	t.strs = append(t.strs, strs)
	return len(g.t.Funcs)
}
