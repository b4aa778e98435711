package hotspot

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Layout is what libjvm.so says of its own data structures, read from the
// tables it exports for the Serviceability Agent (vmStructs.cpp):
// gHotSpotVMStructs (each field's offset in its type, or a static's
// address), gHotSpotVMTypes (each type's size), gHotSpotVMIntConstants and
// gHotSpotVMLongConstants. The layout of each table's entries is itself
// published (gHotSpotVMStructEntryTypeNameOffset …), so nothing here
// assumes a JDK build.
type Layout struct {
	Fields map[string]Field // by "Type::field"
	Types  map[string]Type
	Ints   map[string]int64
	Longs  map[string]uint64

	flagsOnce sync.Once
	flagAddrs map[string]uint64 // flag name → its value's address
	flagsErr  error
}

// Field is one entry of gHotSpotVMStructs.
type Field struct {
	Type   string // the C++ type of the field ("OopHandle", "JavaThreadState")
	Static bool
	Offset uint64 // in its type, for a non-static field
	Addr   uint64 // the variable's address, for a static one
}

// Type is one entry of gHotSpotVMTypes.
type Type struct {
	Super              string
	Size               uint64
	Oop, Int, Unsigned bool
}

// ErrNotHotSpot is wrapped when the process has no VMStructs tables: it
// is not a HotSpot JVM (or libjvm.so's symbols cannot be found).
var ErrNotHotSpot = errors.New("no HotSpot VMStructs tables")

// Bounds on the tables: JDK 17's gHotSpotVMStructs has about 1,900
// entries, its types 1,000, its constants 900; names are identifiers.
const (
	maxTableEntries = 20000
	maxVMName       = 256
)

// ReadLayout reads libjvm's published layout from the target.
func ReadLayout(r *Reader, syms Symbols) (*Layout, error) {
	l := &Layout{Fields: map[string]Field{}, Types: map[string]Type{}, Ints: map[string]int64{}, Longs: map[string]uint64{}}
	if err := readStructs(r, syms, l); err != nil {
		return nil, err
	}
	if err := readTypes(r, syms, l); err != nil {
		return nil, err
	}
	if err := readIntConstants(r, syms, l); err != nil {
		return nil, err
	}
	if err := readLongConstants(r, syms, l); err != nil {
		return nil, err
	}
	return l, nil
}

// tables are the exported tables and the members of their entries
// (each published as a variable gHotSpotVM<Entry><Member>Offset).
var tables = []struct {
	array, prefix string
	members       []string
}{
	{"gHotSpotVMStructs", "gHotSpotVMStructEntry", []string{"TypeName", "FieldName", "TypeString", "IsStatic", "Offset", "Address"}},
	{"gHotSpotVMTypes", "gHotSpotVMTypeEntry", []string{"TypeName", "SuperclassName", "IsOopType", "IsIntegerType", "IsUnsigned", "Size"}},
	{"gHotSpotVMIntConstants", "gHotSpotVMIntConstantEntry", []string{"Name", "Value"}},
	{"gHotSpotVMLongConstants", "gHotSpotVMLongConstantEntry", []string{"Name", "Value"}},
}

// SymbolNames are the names a reading may look up in libjvm.so (Symbols):
// the tables, their entries' layout, and the safepoint's statics.
func SymbolNames() []string {
	var out []string
	for _, t := range tables {
		out = append(out, t.array, t.prefix+"ArrayStride")
		for _, m := range t.members {
			out = append(out, t.prefix+m+"Offset")
		}
	}
	return append(out, symSafepointState, symSafepointCounter, symTracingType, symTracingBegin, symVMOpNames)
}

// table locates one exported table: the array's address (gHotSpotVMStructs
// is a pointer to it), its stride, and the offsets of the named members
// of an entry (each published as a variable holding the offset).
type table struct {
	base, stride uint64
	off          map[string]uint64
}

func readTable(r *Reader, syms Symbols, array, prefix string, members ...string) (*table, error) {
	sym := func(name string) (uint64, error) {
		a, _, ok := syms.Symbol(name)
		if !ok {
			return 0, fmt.Errorf("symbol %s: %w", name, ErrNotHotSpot)
		}
		return a, nil
	}
	at, err := sym(array)
	if err != nil {
		return nil, err
	}
	base, err := r.U64(at, array)
	if err != nil {
		return nil, err
	}
	t := &table{base: base, off: map[string]uint64{}}
	for _, m := range append([]string{"ArrayStride"}, members...) {
		name := prefix + m
		if m != "ArrayStride" {
			name += "Offset"
		}
		a, err := sym(name)
		if err != nil {
			return nil, err
		}
		v, err := r.U64(a, name)
		if err != nil {
			return nil, err
		}
		t.off[m] = v
	}
	t.stride = t.off["ArrayStride"]
	// An entry is a handful of pointers and integers: a stride or an
	// offset beyond that is not HotSpot's.
	if t.stride == 0 || t.stride > 256 {
		return nil, fmt.Errorf("%sArrayStride %d: not an entry size", prefix, t.stride)
	}
	for _, m := range members {
		if t.off[m] > t.stride-4 {
			return nil, fmt.Errorf("%s%sOffset %d: outside an entry of %d bytes", prefix, m, t.off[m], t.stride)
		}
	}
	return t, nil
}

// each calls f with the address of every entry until f says stop (the
// table's terminating entry) or the bound is reached.
func (t *table) each(what string, f func(entry uint64) (more bool, err error)) error {
	for i := uint64(0); i < maxTableEntries; i++ {
		more, err := f(t.base + i*t.stride)
		if err != nil || !more {
			return err
		}
	}
	return fmt.Errorf("%s: no end after %d entries", what, maxTableEntries)
}

func (t *table) ptr(r *Reader, entry uint64, m, what string) (uint64, error) {
	return r.U64(entry+t.off[m], what+" "+m)
}

func (t *table) str(r *Reader, entry uint64, m, what string) (string, error) {
	p, err := t.ptr(r, entry, m, what)
	if err != nil || p == 0 {
		return "", err
	}
	return r.CString(p, maxVMName, what+" "+m)
}

func (t *table) u32(r *Reader, entry uint64, m, what string) (uint32, error) {
	return r.U32(entry+t.off[m], what+" "+m)
}

func readStructs(r *Reader, syms Symbols, l *Layout) error {
	const what = "gHotSpotVMStructs entry"
	t, err := readTable(r, syms, tables[0].array, tables[0].prefix, tables[0].members...)
	if err != nil {
		return err
	}
	return t.each("gHotSpotVMStructs", func(e uint64) (bool, error) {
		typ, err := t.str(r, e, "TypeName", what)
		if err != nil || typ == "" {
			return false, err
		}
		field, err := t.str(r, e, "FieldName", what)
		if err != nil {
			return false, err
		}
		ts, err := t.str(r, e, "TypeString", what)
		if err != nil {
			return false, err
		}
		static, err := t.u32(r, e, "IsStatic", what)
		if err != nil {
			return false, err
		}
		f := Field{Type: ts, Static: static != 0}
		if f.Static {
			f.Addr, err = t.ptr(r, e, "Address", what)
		} else {
			f.Offset, err = t.ptr(r, e, "Offset", what)
		}
		if err != nil {
			return false, err
		}
		l.Fields[typ+"::"+field] = f
		return true, nil
	})
}

func readTypes(r *Reader, syms Symbols, l *Layout) error {
	const what = "gHotSpotVMTypes entry"
	t, err := readTable(r, syms, tables[1].array, tables[1].prefix, tables[1].members...)
	if err != nil {
		return err
	}
	return t.each("gHotSpotVMTypes", func(e uint64) (bool, error) {
		name, err := t.str(r, e, "TypeName", what)
		if err != nil || name == "" {
			return false, err
		}
		var ty Type
		if ty.Super, err = t.str(r, e, "SuperclassName", what); err != nil {
			return false, err
		}
		var oop, integer, unsigned uint32
		if oop, err = t.u32(r, e, "IsOopType", what); err != nil {
			return false, err
		}
		if integer, err = t.u32(r, e, "IsIntegerType", what); err != nil {
			return false, err
		}
		if unsigned, err = t.u32(r, e, "IsUnsigned", what); err != nil {
			return false, err
		}
		if ty.Size, err = t.ptr(r, e, "Size", what); err != nil {
			return false, err
		}
		ty.Oop, ty.Int, ty.Unsigned = oop != 0, integer != 0, unsigned != 0
		l.Types[name] = ty
		return true, nil
	})
}

func readIntConstants(r *Reader, syms Symbols, l *Layout) error {
	const what = "gHotSpotVMIntConstants entry"
	t, err := readTable(r, syms, tables[2].array, tables[2].prefix, tables[2].members...)
	if err != nil {
		return err
	}
	return t.each("gHotSpotVMIntConstants", func(e uint64) (bool, error) {
		name, err := t.str(r, e, "Name", what)
		if err != nil || name == "" {
			return false, err
		}
		v, err := t.u32(r, e, "Value", what)
		if err != nil {
			return false, err
		}
		l.Ints[name] = int64(int32(v))
		return true, nil
	})
}

func readLongConstants(r *Reader, syms Symbols, l *Layout) error {
	const what = "gHotSpotVMLongConstants entry"
	t, err := readTable(r, syms, tables[3].array, tables[3].prefix, tables[3].members...)
	if err != nil {
		return err
	}
	return t.each("gHotSpotVMLongConstants", func(e uint64) (bool, error) {
		name, err := t.str(r, e, "Name", what)
		if err != nil || name == "" {
			return false, err
		}
		v, err := t.ptr(r, e, "Value", what)
		if err != nil {
			return false, err
		}
		l.Longs[name] = v
		return true, nil
	})
}

// MissingError lists what a reader needs that the layout does not have:
// a HotSpot whose structures differ from the versions this package
// knows.
type MissingError struct {
	What    string // what could not be read ("Java threads")
	Missing []string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s: libjvm's VMStructs lack %s (a HotSpot whose layout this reader does not know; it was tested on JDK 17)",
		e.What, strings.Join(e.Missing, ", "))
}

// need collects the fields, types and constants one reader needs, so that
// all that is missing is said at once.
type need struct {
	l       *Layout
	missing []string
}

func (n *need) offset(typ, field string) uint64 {
	f, ok := n.l.Fields[typ+"::"+field]
	if !ok || f.Static {
		n.missing = append(n.missing, typ+"::"+field)
	}
	return f.Offset
}

func (n *need) static(typ, field string) uint64 {
	f, ok := n.l.Fields[typ+"::"+field]
	if !ok || !f.Static {
		n.missing = append(n.missing, typ+"::"+field)
	}
	return f.Addr
}

func (n *need) size(typ string) uint64 {
	t, ok := n.l.Types[typ]
	if !ok {
		n.missing = append(n.missing, "type "+typ)
	}
	return t.Size
}

func (n *need) int(name string) int64 {
	v, ok := n.l.Ints[name]
	if !ok {
		n.missing = append(n.missing, name)
	}
	return v
}

func (n *need) err(what string) error {
	if len(n.missing) == 0 {
		return nil
	}
	sort.Strings(n.missing)
	return &MissingError{What: what, Missing: n.missing}
}
