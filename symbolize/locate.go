package symbolize

import (
	"debug/elf"
	"fmt"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"path"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Locate resolves one address. It never returns nil: an address nobody
// can name becomes an explicit "file+0xoffset" or "[unknown] 0xaddr"
// frame. Results are cached: the same address gives the same *Location
// (for JIT code, the same address and the same code).
func (p *Process) Locate(a Addr) *Location {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.locate(a)
}

func (p *Process) locate(a Addr) *Location {
	if a.Kernel {
		return p.locateKernel(a)
	}
	cache := p.cache[b2i(a.Return)]
	c, ok := cache[a.PC]
	if !ok {
		c = p.locateUser(a)
		cache[a.PC] = c
		p.stats.Locations++
	}
	if c.miss {
		if p.jit != nil {
			if s, ok := p.jit.lookupAt(lookupPC(a), a.Time); ok {
				return p.jitLocation(a, s)
			}
		}
		if !c.counted {
			// Counted once, when the unnamed frame is first handed
			// out: an address the JIT names is not a miss.
			c.counted = true
			cache[a.PC] = c
			p.countMiss(c.m)
		}
	}
	return c.loc
}

func (p *Process) countMiss(m *mapping) {
	if m == nil {
		p.stats.Unknown++
		return
	}
	m.unnamed++
	p.stats.Unnamed++
}

// LocateStack resolves a sampled stack taken at CLOCK_MONOTONIC time t:
// innermost first, its first kernel entries kernel addresses (the layout
// of sampler.Sample.Stack). Every entry but the innermost of each part is
// a return address; the innermost user entry of a stack that entered the
// kernel is where user code stopped, not a return address. The user part
// ends at the function its thread started in (see Outermost): what a walk
// found beyond it is stale memory. The locations are appended to out.
func (p *Process) LocateStack(out []*Location, stack []uint64, kernel int, t uint64) []*Location {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(out)
	for i, pc := range stack {
		a := Addr{PC: pc, Time: t, Kernel: i < kernel, Return: i != 0 && i != kernel}
		out = append(out, p.locate(a))
	}
	user := n + min(kernel, len(stack))
	return append(out[:user], trimOutermost(out[user:])...)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lookupPC is the address to name: a return address belongs to the call
// before it.
func lookupPC(a Addr) uint64 {
	if a.Return && a.PC > 0 {
		return a.PC - 1
	}
	return a.PC
}

// locateUser names a user-space address from the mappings and their files.
func (p *Process) locateUser(a Addr) cached {
	pc := lookupPC(a)
	m := p.mappingAt(pc)
	if m == nil {
		return cached{loc: unknownLocation(a.PC), miss: true}
	}
	m.addrs++
	if m.anon || m.obj == nil || m.obj.o == nil {
		name := m.pub.File
		if m.obj != nil && m.obj.o == nil {
			name = path.Base(m.pm.Path) + fmt.Sprintf("+%#x", pc-m.pm.Start+m.pm.Offset)
		} else {
			name = fmt.Sprintf("%s %#x", name, a.PC)
		}
		loc := &Location{Addr: a.PC, Mapping: m.pub, Kind: m.pub.Kind, Lines: []Line{{Function: name}}}
		return cached{loc: loc, miss: true, m: m}
	}
	o := m.obj.o
	p.loadSymbols(o)
	m.setFlags(o)
	vaddr := pc - m.bias
	lines := p.nativeLines(o, vaddr)
	if len(lines) == 0 {
		lines = []Line{{Function: fmt.Sprintf("%s+%#x", path.Base(m.pm.Path), vaddr)}}
		loc := &Location{Addr: a.PC, Mapping: m.pub, Kind: KindNative, Lines: lines}
		return cached{loc: loc, miss: true, m: m}
	}
	return cached{loc: &Location{Addr: a.PC, Mapping: m.pub, Kind: KindNative, Lines: lines}}
}

func unknownLocation(pc uint64) *Location {
	return &Location{Addr: pc, Kind: KindUnknown, Lines: []Line{{Function: fmt.Sprintf("[unknown] %#x", pc)}}}
}

// nativeLines names vaddr in o: the symbol that holds it, and when the
// file has them, the inlined calls and source positions.
func (p *Process) nativeLines(o *objFile, vaddr uint64) []Line {
	var symName string
	if s, ok := o.syms.lookup(vaddr); ok {
		symName = o.syms.name(s)
	}
	var frames []frame
	if o.lines != nil {
		var err error
		frames, err = o.lines.frames(vaddr)
		if err != nil {
			o.note(err.Error())
		}
	}
	if symName == "" && (len(frames) == 0 || frames[len(frames)-1].fn == "") {
		return nil
	}
	if len(frames) == 0 {
		return []Line{line(symName, "", 0)}
	}
	// The symbol table names the function that holds the code (a
	// clone like foo.cold or foo.part.0 keeps its suffix); DWARF names
	// the inlined calls inside it.
	out := make([]Line, len(frames))
	for i, f := range frames {
		name := f.fn
		if i == len(frames)-1 && symName != "" {
			name = symName
		}
		if name == "" {
			name = "[inlined]"
		}
		out[i] = line(name, f.file, f.line)
	}
	return out
}

func line(raw, file string, ln int64) Line {
	return Line{Function: demangleName(raw), SystemName: raw, File: file, Line: ln}
}

// maxDemangle bounds the names given to the demangler, whose time grows
// faster than linearly with a name's length (80,000 bytes took seconds):
// names come from files the target controls. Real C++ names longer than
// this are rare and stay mangled.
const maxDemangle = 4096

// demangleName turns C++ (Itanium) and Rust names into what a person
// reads, with parameter types and without Rust's hash, and drops the
// symbol version a .symtab appends ("pthread_mutex_lock@@GLIBC_2.2.5");
// other names are returned as they are.
func demangleName(raw string) string {
	if i := strings.IndexByte(raw, '@'); i > 0 && !strings.ContainsAny(raw[:i], " :") {
		raw = raw[:i]
	}
	if !strings.HasPrefix(raw, "_Z") && !strings.HasPrefix(raw, "_R") || len(raw) > maxDemangle {
		return raw
	}
	if d, err := demangle.ToString(raw, demangle.MaxLength(16)); err == nil {
		return d
	}
	return raw
}

// note records, once, a problem met while reading a file.
func (o *objFile) note(s string) {
	for _, n := range o.notes {
		if n == s {
			return
		}
	}
	if len(o.notes) < 16 {
		o.notes = append(o.notes, s)
	}
}

// loadSymbols reads o's symbols and line information on first use, from
// the best sources it has: .symtab (its own, or its debug file's, or its
// MiniDebugInfo's) merged with .dynsym; DWARF (its own or its debug
// file's), or the Go pclntab.
func (p *Process) loadSymbols(o *objFile) {
	if o.loaded {
		return
	}
	o.loaded = true
	key, cacheable := p.cacheKey(o)
	if cacheable {
		if fs := cachedFile(key); fs != nil {
			o.apply(fs)
			return
		}
	}
	defer func() {
		// Everything needed later is in memory now: let the debug
		// file's descriptor go, and share the tables.
		if o.debug != nil {
			o.debug.close()
			o.debug = nil
		}
		// A target that exited while its files were read may have
		// cost us sources found through its root (debug files): what
		// was read then is this capture's, not the file's for good.
		if cacheable && procfs.Alive(p.pid) {
			cacheFile(key, o.snapshot())
		}
	}()
	t := &symtab{}
	var sources []string
	addTable := func(f *objFile, what string) bool {
		s := f.symbolSection(elf.SHT_SYMTAB)
		if s == nil {
			return false
		}
		n, err := t.addSection(f.ef, s)
		if err != nil {
			o.note(fmt.Sprintf("%s: %v", f.name, err))
		}
		if n > 0 {
			sources = append(sources, what)
		}
		return n > 0
	}
	haveSymtab := addTable(o, "symtab")
	haveDWARF := o.hasDWARF()
	if !haveSymtab || !haveDWARF {
		dbg, how, tried := p.findDebugFile(o)
		if dbg != nil {
			o.debug, o.debugHow = dbg, how
			if !haveSymtab {
				haveSymtab = addTable(dbg, how)
			}
		} else if !haveSymtab && len(tried) > 0 {
			o.note("no debug file: " + strings.Join(tried, "; "))
		}
	}
	// A full .symtab (the file's or its debug file's) holds every
	// dynamic symbol too; MiniDebugInfo holds only what .dynsym lacks.
	needDynsym := !haveSymtab
	if !haveSymtab {
		mini, err := o.miniDebugInfo()
		if err != nil {
			o.note(err.Error())
		} else if mini != nil {
			haveSymtab = addTable(mini, ".gnu_debugdata")
		}
	}
	if s := o.symbolSection(elf.SHT_DYNSYM); s != nil && needDynsym {
		n, err := t.addSection(o.ef, s)
		if err != nil {
			o.note(fmt.Sprintf("%s: %v", o.name, err))
		}
		if n > 0 && !haveSymtab {
			sources = append(sources, "dynsym")
		}
	}
	p.loadLines(o, haveDWARF, t, &sources)
	t.finish()
	o.syms = t
	if len(sources) > 0 {
		o.symSource = sources[0]
	} else {
		o.note("no symbols: stripped, and no debug file or MiniDebugInfo")
	}
}

// setFlags tells pprof what a mapping's locations carry.
func (m *mapping) setFlags(o *objFile) {
	m.pub.HasFunctions = o.syms.len() > 0
	m.pub.HasFilenames = o.lines != nil
	m.pub.HasLineNumbers = o.lines != nil
	_, dwarf := o.lines.(*dwarfLines)
	m.pub.HasInlineFrames = dwarf
}

// loadLines picks the line source: the file's DWARF, its debug file's,
// or the Go pclntab (which also names functions when .symtab is gone).
func (p *Process) loadLines(o *objFile, haveDWARF bool, t *symtab, sources *[]string) {
	src := o
	what := "dwarf"
	if !haveDWARF && o.debug != nil && o.debug.hasDWARF() {
		src, what = o.debug, "dwarf ("+o.debugHow+")"
	}
	if src.hasDWARF() {
		dl, err := src.openDWARF()
		if err != nil {
			o.note(err.Error())
		} else {
			o.lines, o.lineSource = dl, what
			return
		}
	}
	if !o.hasSection(".gopclntab") {
		return
	}
	g, err := o.openGoTable()
	if err != nil {
		o.note(err.Error())
		return
	}
	o.lines, o.lineSource = g, "gopclntab"
	if t.len() == 0 || len(*sources) == 0 || (*sources)[0] == "dynsym" {
		if g.addTo(t) > 0 {
			*sources = append([]string{"gopclntab"}, *sources...)
		}
	}
}
