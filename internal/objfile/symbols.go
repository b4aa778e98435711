package objfile

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Env says where a file's separate debug information is looked for. What
// was found with one Env is kept for that Env only (Key): a container's
// debug files are not another root's.
type Env struct {
	// DebugDirs are where separate debug files live:
	// <dir>/.build-id/xx/yyyy.debug and <dir>/<binary's directory>/<debug
	// link>. Nil means DefaultDebugDirs.
	DebugDirs []string
	// Open opens a debug file by its path as the target sees it (through
	// its root, then in ours when the roots differ). Nil: os.Open.
	Open func(name string) (*os.File, error)
	// Key identifies DebugDirs and the root Open reads from.
	Key string
	// Keep, when not nil, is asked after a file's symbols were loaded:
	// false means what was found may be incomplete (the target exited
	// while its files were read, which may have cost a debug file found
	// through its root) and is not kept for later targets.
	Keep func() bool
}

// DefaultDebugDirs is where distributions install debug files.
var DefaultDebugDirs = []string{"/usr/lib/debug"}

func (e *Env) debugDirs() []string {
	if e.DebugDirs == nil {
		return DefaultDebugDirs
	}
	return e.DebugDirs
}

func (e *Env) open(name string) (*os.File, error) {
	if e.Open == nil {
		return os.Open(name)
	}
	return e.Open(name)
}

// Symbols are the names and source positions of one file's code, from the
// best sources it has: .symtab (its own, its debug file's or its
// MiniDebugInfo's) merged with .dynsym, or a Go binary's pclntab; lines
// and inline chains from DWARF (its own or its debug file's) or the
// pclntab. They are immutable once loaded, but for Notes.
type Symbols struct {
	syms  *symtab
	lines lineSource // nil when the file has no line information
	// Source says which table named functions: "symtab", "dynsym",
	// ".gnu_debugdata", "gopclntab", "build-id PATH", "debuglink PATH";
	// "" when none. LineSource where lines come from: "dwarf", "dwarf
	// (debuglink PATH)", "gopclntab"; "" when none.
	Source, LineSource string

	mu    sync.Mutex
	notes []string // what is missing and why
	bytes int64
}

// Frame is one function at an address: the innermost inlined call first,
// the function that holds the code last. Func is the name as the file
// wrote it (mangled); "" when only the position is known.
type Frame struct {
	Func string
	File string
	Line int64
}

// Notes returns what could not be used and why.
func (s *Symbols) Notes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.notes...)
}

// note records, once, a problem met while reading a file.
func (s *Symbols) note(n string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, have := range s.notes {
		if have == n {
			return
		}
	}
	if len(s.notes) < 16 {
		s.notes = append(s.notes, n)
	}
}

// Len is the number of function symbols.
func (s *Symbols) Len() int { return s.syms.len() }

// HasLines reports whether files and lines are known.
func (s *Symbols) HasLines() bool { return s.lines != nil }

// HasInline reports whether inlined calls are known (DWARF).
func (s *Symbols) HasInline() bool {
	_, ok := s.lines.(*dwarfLines)
	return ok
}

// Frames names link-time address vaddr: the symbol that holds it, and
// when the file has them, the inlined calls and source positions,
// innermost first. Nil when nothing names it.
func (s *Symbols) Frames(vaddr uint64) []Frame {
	var symName string
	if sy, ok := s.syms.lookup(vaddr); ok {
		symName = s.syms.name(sy)
	}
	var frames []Frame
	if s.lines != nil {
		var err error
		frames, err = s.lines.frames(vaddr)
		if err != nil {
			s.note(err.Error())
		}
	}
	if symName == "" && (len(frames) == 0 || frames[len(frames)-1].Func == "") {
		return nil
	}
	if len(frames) == 0 {
		return []Frame{{Func: symName}}
	}
	// The symbol table names the function that holds the code (a clone
	// like foo.cold or foo.part.0 keeps its suffix); the line source
	// names the inlined calls inside it.
	if symName != "" {
		frames[len(frames)-1].Func = symName
	}
	return frames
}

// Symbol returns the name of the symbol holding vaddr and its start.
func (s *Symbols) Symbol(vaddr uint64) (name string, start uint64, ok bool) {
	sy, ok := s.syms.lookup(vaddr)
	if !ok {
		return "", 0, false
	}
	return s.syms.name(sy), sy.addr, true
}

// Symbols returns the file's symbols for env, loading them on first use.
// It fails only after the last user closed the file.
func (f *File) Symbols(env Env) (*Symbols, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.syms[env.Key]; s != nil {
		return s, nil
	}
	if !f.readable() {
		return nil, ErrClosed
	}
	s := f.loadSymbols(&env)
	if env.Keep == nil || env.Keep() {
		if f.syms == nil {
			f.syms = map[string]*Symbols{}
		}
		f.syms[env.Key] = s
		f.grow(s.bytes)
	}
	return s, nil
}

// loadSymbols reads f's symbols and line information (f.mu held).
func (f *File) loadSymbols(env *Env) *Symbols {
	s := &Symbols{}
	t := &symtab{}
	var sources []string
	var debug *File
	var debugHow string
	defer func() {
		// Everything needed later is in memory now: let the debug
		// file's descriptor go.
		if debug != nil {
			debug.detach()
		}
	}()
	addTable := func(from *File, what string) bool {
		sec := from.symbolSection(elf.SHT_SYMTAB)
		if sec == nil {
			return false
		}
		n, err := t.addSection(from.ef, sec)
		if err != nil {
			s.note(fmt.Sprintf("%s: %v", from.Name, err))
		}
		if n > 0 {
			sources = append(sources, what)
		}
		return n > 0
	}
	haveSymtab := addTable(f, "symtab")
	haveDWARF := f.hasDWARF()
	if !haveSymtab || !haveDWARF {
		dbg, how, tried := f.findDebugFile(env)
		if dbg != nil {
			debug, debugHow = dbg, how
			if !haveSymtab {
				haveSymtab = addTable(dbg, how)
			}
		} else if !haveSymtab && len(tried) > 0 {
			s.note("no debug file: " + strings.Join(tried, "; "))
		}
	}
	// A full .symtab (the file's or its debug file's) holds every
	// dynamic symbol too; MiniDebugInfo holds only what .dynsym lacks.
	needDynsym := !haveSymtab
	if !haveSymtab {
		mini, err := f.miniDebugInfo()
		if err != nil {
			s.note(err.Error())
		} else if mini != nil {
			haveSymtab = addTable(mini, ".gnu_debugdata")
		}
	}
	if sec := f.symbolSection(elf.SHT_DYNSYM); sec != nil && needDynsym {
		n, err := t.addSection(f.ef, sec)
		if err != nil {
			s.note(fmt.Sprintf("%s: %v", f.Name, err))
		}
		if n > 0 && !haveSymtab {
			sources = append(sources, "dynsym")
		}
	}
	t.addPLT(f.ef)
	f.loadLines(s, haveDWARF, debug, debugHow, t, &sources)
	t.finish()
	s.syms = t
	s.bytes += int64(len(t.syms)) * 24
	for _, b := range t.strs {
		s.bytes += int64(len(b))
	}
	if len(sources) > 0 {
		s.Source = sources[0]
	} else {
		s.note("no symbols: stripped, and no debug file or MiniDebugInfo")
	}
	return s
}

// loadLines picks the line source: the file's DWARF, its debug file's,
// or the Go pclntab (which also names functions when .symtab is gone).
func (f *File) loadLines(s *Symbols, haveDWARF bool, debug *File, debugHow string, t *symtab, sources *[]string) {
	src := f
	what := "dwarf"
	if !haveDWARF && debug != nil && debug.hasDWARF() {
		src, what = debug, "dwarf ("+debugHow+")"
	}
	if src.hasDWARF() {
		dl, err := src.openDWARF()
		if err != nil {
			s.note(err.Error())
		} else {
			s.lines, s.LineSource = dl, what
			s.bytes += dl.sizeBytes()
			return
		}
	}
	g, err := f.goLocked()
	if err != nil {
		s.note(err.Error())
		return
	}
	if g == nil {
		return
	}
	s.lines, s.LineSource = g, "gopclntab"
	if t.len() == 0 || len(*sources) == 0 || (*sources)[0] == "dynsym" {
		if g.addTo(t) > 0 {
			*sources = append([]string{"gopclntab"}, *sources...)
		}
	}
}
