package objfile

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
)

// lineSource gives the source position and the inline chain at an
// address. frames returns them innermost first; the last frame is the
// function that holds the code. A frame's Func may be "" when the source
// knows the position but not the function (the symbol table names it).
type lineSource interface {
	frames(vaddr uint64) ([]Frame, error)
}

// dwarfLines answers from DWARF. Only the index of compilation units is
// built up front; a unit's line table and its tree of functions and
// inlined calls are read the first time an address falls in it.
type dwarfLines struct {
	mu     sync.Mutex // units load lazily; Processes share a file's tables
	size   int64      // bytes of the sections read
	name   string
	d      *dwarf.Data
	line   []byte // .debug_line, checked before debug/dwarf reads it
	bo     binary.ByteOrder
	units  []*dwarfUnit
	ranges []unitRange // sorted by lo
	names  map[dwarf.Offset]dieName
	// qual is the scope (namespaces, classes) of the functions seen in
	// loaded units: "app", "std::thread::_Invoker<std::tuple<void (*)()> >".
	qual map[dwarf.Offset]string
}

// dieName is how a function entry is named: a linkage (mangled) name,
// which says its scope, or a plain name given by the entry at from, whose
// scope is its enclosing namespaces and classes.
type dieName struct {
	name    string
	from    dwarf.Offset
	mangled bool
}

type unitRange struct {
	lo, hi uint64
	unit   int
}

type dwarfUnit struct {
	off    dwarf.Offset
	loaded bool
	err    error
	seqs   []lineSeq // sorted by lo
	files  []string  // file names of rows, then the line table's file list
	// callFileBase is where the line table's own list starts in files:
	// DW_AT_call_file indexes that list.
	callFileBase int32
	funcs        []funcRange
	nodes        []scopeNode
}

type lineSeq struct {
	lo, hi uint64
	rows   []lineRow
}

type lineRow struct {
	addr uint64
	file int32 // index in dwarfUnit.files
	line int32
}

// funcRange is one address range of a function with code.
type funcRange struct {
	lo, hi uint64
	node   int32
}

// scopeNode is a function or an inlined call in a unit's tree.
type scopeNode struct {
	fn       string
	name     dieName // how fn is named, until the unit's scopes are known
	callFile int32   // of an inlined call: where it was called from
	callLine int32
	ranges   [][2]uint64
	children []int32 // inlined calls directly inside
}

func (n *scopeNode) contains(a uint64) bool {
	for _, r := range n.ranges {
		if a >= r[0] && a < r[1] {
			return true
		}
	}
	return false
}

// hasDWARF reports whether the file carries DWARF debug information.
func (o *File) hasDWARF() bool {
	return o.hasSection(".debug_info") || o.hasSection(".zdebug_info")
}

// openDWARF reads the file's DWARF sections and indexes its units.
func (o *File) openDWARF() (*dwarfLines, error) {
	dl := &dwarfLines{name: o.Name, names: map[dwarf.Offset]dieName{}, qual: map[dwarf.Offset]string{}}
	err := safely(o.Name, func() error {
		d, err := dl.dwarfData(o)
		if err != nil {
			return fmt.Errorf("%s: DWARF: %w", o.Name, err)
		}
		dl.d = d
		return dl.index()
	})
	if err != nil {
		return nil, err
	}
	return dl, nil
}

// dwarfData reads only the DWARF sections that names, lines and inline
// chains need. elf.File.DWARF would also inflate location lists and type
// units, a fifth of the work for a distribution's debug file.
func (dl *dwarfLines) dwarfData(o *File) (*dwarf.Data, error) {
	var err error
	get := func(name string) []byte {
		b, e := o.section(".debug_" + name)
		if b == nil && e == nil {
			b, e = o.zdebugSection(".zdebug_" + name)
		}
		if e != nil && err == nil {
			err = e
		}
		dl.size += int64(len(b))
		return b
	}
	abbrev, info, line, ranges, str := get("abbrev"), get("info"), get("line"), get("ranges"), get("str")
	if err != nil {
		return nil, err
	}
	dl.line, dl.bo = line, o.ef.ByteOrder
	d, err := dwarf.New(abbrev, nil, nil, info, line, nil, ranges, str)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"addr", "line_str", "rnglists", "str_offsets"} {
		if b := get(name); b != nil {
			if e := d.AddSection(".debug_"+name, b); e != nil {
				return nil, e
			}
		}
	}
	return d, err
}

// index lists the compilation units and the addresses each covers.
func (dl *dwarfLines) index() error {
	r := dl.d.Reader()
	last := dwarf.Offset(0)
	for first := true; ; first = false {
		e, err := r.Next()
		if err == nil && e != nil && !first && e.Offset <= last {
			// SkipChildren follows DW_AT_sibling, which a damaged
			// file can point backwards: that would loop forever.
			err = fmt.Errorf("entry at offset %#x follows one at %#x", e.Offset, last)
		}
		if err != nil {
			if len(dl.units) > 0 {
				break // keep the units read before the damage
			}
			return fmt.Errorf("%s: DWARF units: %w", dl.name, err)
		}
		if e == nil {
			break
		}
		last = e.Offset
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			rs, err := dl.d.Ranges(e)
			if err == nil && len(rs) > 0 {
				u := len(dl.units)
				dl.units = append(dl.units, &dwarfUnit{off: e.Offset})
				for _, rg := range rs {
					if rg[0] != 0 && rg[1] > rg[0] { // 0 is the linker's tombstone
						dl.ranges = append(dl.ranges, unitRange{rg[0], rg[1], u})
					}
				}
			}
		}
		r.SkipChildren()
	}
	sort.Slice(dl.ranges, func(i, j int) bool { return dl.ranges[i].lo < dl.ranges[j].lo })
	return nil
}

// maxOverlapScan bounds the walk back over ranges that start below an
// address but may not contain it.
const maxOverlapScan = 64

func (dl *dwarfLines) unitAt(vaddr uint64) *dwarfUnit {
	i := sort.Search(len(dl.ranges), func(i int) bool { return dl.ranges[i].lo > vaddr }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if r := dl.ranges[j]; vaddr >= r.lo && vaddr < r.hi {
			return dl.units[r.unit]
		}
	}
	return nil
}

func (dl *dwarfLines) sizeBytes() int64 { return dl.size }

func (dl *dwarfLines) frames(vaddr uint64) (out []Frame, err error) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	u := dl.unitAt(vaddr)
	if u == nil {
		return nil, nil
	}
	if !u.loaded {
		u.loaded = true
		u.err = safely(dl.name, func() error { return dl.load(u) })
	}
	if u.err != nil && len(u.seqs) == 0 {
		return nil, u.err
	}
	file, line := u.line(vaddr)
	chain := u.chain(vaddr)
	if len(chain) == 0 {
		if file == "" {
			return nil, nil
		}
		return []Frame{{File: file, Line: line}}, nil
	}
	// The innermost function is at the line table's position; each
	// function around an inlined call is at that call's position.
	for i := len(chain) - 1; i >= 0; i-- {
		n := &u.nodes[chain[i]]
		out = append(out, Frame{Func: n.fn, File: file, Line: line})
		file, line = u.file(n.callFile), int64(n.callLine)
	}
	return out, nil
}

// load reads a unit's line table and its function tree.
func (dl *dwarfLines) load(u *dwarfUnit) error {
	r := dl.d.Reader()
	r.Seek(u.off)
	cu, err := r.Next()
	if err != nil || cu == nil {
		return fmt.Errorf("%s: DWARF unit at offset %#x: %v", dl.name, u.off, err)
	}
	if err := dl.loadLines(u, cu); err != nil {
		return err
	}
	return dl.loadTree(u, r)
}

func (dl *dwarfLines) loadLines(u *dwarfUnit, cu *dwarf.Entry) error {
	if off, ok := cu.Val(dwarf.AttrStmtList).(int64); ok {
		if err := checkLineHeader(dl.line, off, dl.bo); err != nil {
			return fmt.Errorf("%s: %w", dl.name, err)
		}
	}
	lr, err := dl.d.LineReader(cu)
	if err != nil {
		return fmt.Errorf("%s: line table of unit at offset %#x: %w", dl.name, u.off, err)
	}
	if lr == nil {
		return nil
	}
	fileIdx := map[*dwarf.LineFile]int32{}
	var seq *lineSeq
	var le dwarf.LineEntry
	for {
		if err := lr.Next(&le); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			// Keep what was read: a damaged tail loses its rows only.
			break
		}
		if seq == nil {
			seq = &lineSeq{lo: le.Address}
		}
		if le.EndSequence {
			seq.hi = le.Address
			if seq.lo != 0 && seq.hi > seq.lo && len(seq.rows) > 0 {
				u.seqs = append(u.seqs, *seq)
			}
			seq = nil
			continue
		}
		idx, ok := fileIdx[le.File]
		if !ok {
			idx = int32(len(u.files))
			name := ""
			if le.File != nil {
				name = le.File.Name
			}
			u.files = append(u.files, name)
			fileIdx[le.File] = idx
		}
		seq.rows = append(seq.rows, lineRow{addr: le.Address, file: idx, line: int32(le.Line)})
	}
	sort.Slice(u.seqs, func(i, j int) bool { return u.seqs[i].lo < u.seqs[j].lo })
	// DW_AT_call_file indexes the line table's own file list; append it
	// after the files the rows use, remembering where it starts.
	base := int32(len(u.files))
	for _, f := range lr.Files() {
		name := ""
		if f != nil {
			name = f.Name
		}
		u.files = append(u.files, name)
	}
	u.callFileBase = base
	return nil
}

// loadTree reads the unit's functions with code and the inlined calls in
// them. r is positioned after the unit's own entry.
func (dl *dwarfLines) loadTree(u *dwarfUnit, r *dwarf.Reader) error {
	type level struct {
		scope  int32
		prefix string // the namespaces and classes around
	}
	stack := []level{{scope: -1}}
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("%s: DWARF entries of unit at offset %#x: %w", dl.name, u.off, err)
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		enclosing := stack[len(stack)-1].scope
		prefix := stack[len(stack)-1].prefix
		scope := enclosing
		switch e.Tag {
		case dwarf.TagNamespace, dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType:
			name, _ := e.Val(dwarf.AttrName).(string)
			if name == "" && e.Tag == dwarf.TagNamespace {
				name = "(anonymous namespace)"
			}
			if name != "" {
				prefix = joinScope(prefix, name)
			}
		case dwarf.TagSubprogram:
			if prefix != "" {
				dl.qual[e.Offset] = prefix
			}
			scope = -1
			if rs, err := dl.d.Ranges(e); err == nil && len(rs) > 0 {
				scope = u.addNode(scopeNode{name: dl.nameOf(e, 0), ranges: rs})
				for _, rg := range rs {
					if rg[0] != 0 && rg[1] > rg[0] {
						u.funcs = append(u.funcs, funcRange{rg[0], rg[1], scope})
					}
				}
			}
		case dwarf.TagInlinedSubroutine:
			if rs, err := dl.d.Ranges(e); err == nil && len(rs) > 0 && enclosing >= 0 {
				callFile, _ := e.Val(dwarf.AttrCallFile).(int64)
				callLine, _ := e.Val(dwarf.AttrCallLine).(int64)
				scope = u.addNode(scopeNode{
					name:     dl.nameOf(e, 0),
					callFile: int32(callFile),
					callLine: int32(callLine),
					ranges:   rs,
				})
				u.nodes[enclosing].children = append(u.nodes[enclosing].children, scope)
			}
		}
		if e.Children {
			stack = append(stack, level{scope: scope, prefix: prefix})
		}
	}
	// Now that the unit's scopes are known, a plain name gets the scope
	// of the entry that gave it, as gdb names it ("app::inl2").
	for i := range u.nodes {
		n := &u.nodes[i]
		n.fn = n.name.name
		if q := dl.qual[n.name.from]; !n.name.mangled && q != "" && n.fn != "" {
			n.fn = q + "::" + n.fn
		}
		n.name = dieName{}
	}
	sort.Slice(u.funcs, func(i, j int) bool { return u.funcs[i].lo < u.funcs[j].lo })
	return nil
}

// joinScope appends a namespace or class to a scope.
func joinScope(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "::" + name
}

func (u *dwarfUnit) addNode(n scopeNode) int32 {
	u.nodes = append(u.nodes, n)
	return int32(len(u.nodes) - 1)
}

// maxNameHops bounds the chain of abstract_origin and specification
// references followed to name a function.
const maxNameHops = 4

// dwAttrMIPSLinkageName is the pre-DWARF-4 linkage name GCC still emits.
const dwAttrMIPSLinkageName dwarf.Attr = 0x2007

// nameOf returns the name of a function entry: its linkage (mangled)
// name, else that of the entry it refines, else its plain name.
func (dl *dwarfLines) nameOf(e *dwarf.Entry, hops int) dieName {
	if n, ok := e.Val(dwarf.AttrLinkageName).(string); ok && n != "" {
		return dieName{name: n, from: e.Offset, mangled: true}
	}
	if n, ok := e.Val(dwAttrMIPSLinkageName).(string); ok && n != "" {
		return dieName{name: n, from: e.Offset, mangled: true}
	}
	if hops < maxNameHops {
		for _, a := range []dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
			off, ok := e.Val(a).(dwarf.Offset)
			if !ok {
				continue
			}
			if n := dl.nameAt(off, hops+1); n.name != "" {
				return n
			}
		}
	}
	n, _ := e.Val(dwarf.AttrName).(string)
	return dieName{name: n, from: e.Offset}
}

func (dl *dwarfLines) nameAt(off dwarf.Offset, hops int) dieName {
	if n, ok := dl.names[off]; ok {
		return n
	}
	r := dl.d.Reader()
	r.Seek(off)
	e, err := r.Next()
	var n dieName
	if err == nil && e != nil {
		n = dl.nameOf(e, hops)
	}
	dl.names[off] = n
	return n
}

// line returns the line table's position for vaddr.
func (u *dwarfUnit) line(vaddr uint64) (string, int64) {
	i := sort.Search(len(u.seqs), func(i int) bool { return u.seqs[i].lo > vaddr }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		s := &u.seqs[j]
		if vaddr < s.lo || vaddr >= s.hi {
			continue
		}
		k := sort.Search(len(s.rows), func(k int) bool { return s.rows[k].addr > vaddr }) - 1
		if k < 0 {
			return "", 0
		}
		row := s.rows[k]
		return u.files[row.file], int64(row.line)
	}
	return "", 0
}

// file names a DW_AT_call_file index.
func (u *dwarfUnit) file(idx int32) string {
	i := int(u.callFileBase) + int(idx)
	if idx < 0 || i >= len(u.files) {
		return ""
	}
	return u.files[i]
}

// chain returns the nodes holding vaddr, outermost function first.
func (u *dwarfUnit) chain(vaddr uint64) []int32 {
	i := sort.Search(len(u.funcs), func(i int) bool { return u.funcs[i].lo > vaddr }) - 1
	top := int32(-1)
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if f := u.funcs[j]; vaddr >= f.lo && vaddr < f.hi {
			top = f.node
			break
		}
	}
	if top < 0 {
		return nil
	}
	chain := []int32{top}
	for depth := 0; depth < len(u.nodes); depth++ {
		next := int32(-1)
		for _, c := range u.nodes[chain[len(chain)-1]].children {
			if u.nodes[c].contains(vaddr) {
				next = c
				break
			}
		}
		if next < 0 {
			break
		}
		chain = append(chain, next)
	}
	return chain
}
