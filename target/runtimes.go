package target

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/runtimes"
)

// Reader is the reader of one language runtime a target runs: its
// descriptor and the instance its Reader opened over the target, or why
// it could not be opened.
type Reader struct {
	Runtime  *runtimes.Runtime
	Instance runtimes.Instance // nil when Err is set
	Err      error
}

// readers are the target's runtime readers, opened once.
type readers struct {
	once sync.Once
	all  []Reader
}

// Readers are the readers of the runtimes the target runs, opened at the
// first call (call it before any stop: their images' symbols and layouts
// are read then): one for each descriptor (runtimes.All) that has a
// Reader and recognises the target (runtimes.Runtime.Recognises: its
// executable's name, a library, a symbol its executable defines), in the
// descriptors' order. A runtime its reader finds absent after all
// (runtimes.ErrAbsent) is left out; one that is there but cannot be read
// has Err, for a note.
func (p *Process) Readers() []Reader {
	p.rts.once.Do(func() { p.rts.all = openReaders(p) })
	return append([]Reader(nil), p.rts.all...)
}

// Reader is the instance of rt's reader over the target: an error
// wrapping runtimes.ErrAbsent when the target does not run rt (or rt has
// no reader).
func (p *Process) Reader(rt *runtimes.Runtime) (runtimes.Instance, error) {
	for _, r := range p.Readers() {
		if r.Runtime == rt {
			return r.Instance, r.Err
		}
	}
	return nil, fmt.Errorf("pid %d: %s: %w", p.pid, rt, runtimes.ErrAbsent)
}

func openReaders(p *Process) []Reader {
	proc := p.ReaderProcess()
	var out []Reader
	for _, rt := range runtimes.All() {
		if rt.Reader == nil || !rt.Recognises(proc) {
			continue
		}
		inst, err := rt.Reader.Open(proc)
		if errors.Is(err, runtimes.ErrAbsent) {
			continue
		}
		out = append(out, Reader{Runtime: rt, Instance: inst, Err: err})
	}
	return out
}

// ReaderProcess is what the runtimes' readers see of the target: its
// memory, each mapped file once (at its run-time addresses; a file that
// could not be opened without an Object), its threads now.
func (p *Process) ReaderProcess() *runtimes.Process {
	exe, _ := procfs.Exe(p.space.Via())
	tids, _ := procfs.Threads(p.pid)
	proc := &runtimes.Process{PID: p.pid, Memory: p.space.Memory(), TIDs: tids, Mappings: mappings{p.space}}
	seen := map[*objfile.File]bool{}
	unopened := map[string]bool{}
	for _, m := range p.space.Modules() {
		switch {
		case m.Gone || m.Anon || seen[m.File]:
		case m.File == nil && m.Err != nil && !unopened[m.Path]:
			unopened[m.Path] = true
			proc.Images = append(proc.Images, runtimes.Image{Path: m.Path, Executable: m.Path == exe, Err: m.Err})
		case m.File != nil:
			seen[m.File] = true
			proc.Images = append(proc.Images, runtimes.Image{Path: m.Path, Executable: m.Path == exe, Object: image{m: m, env: p.space.Env()}})
		}
	}
	return proc
}

// image is a mapped file as a runtime's reader reads it: at the
// addresses the target maps it at.
type image struct {
	m   *addrspace.Module
	env objfile.Env
}

func (i image) Lookup(names []string) (runtimes.Symbols, error) {
	found, err := i.m.File.LookupNames(names)
	if err != nil && len(found) == 0 {
		return nil, err
	}
	syms := imageSymbols{}
	for n, s := range found {
		syms[n] = objfile.Named{Addr: s.Addr + i.m.Bias, Size: s.Size}
	}
	return syms, nil
}

func (i image) Sections() []runtimes.Section {
	var out []runtimes.Section
	for _, s := range i.m.File.Sections() {
		out = append(out, runtimes.Section{Name: s.Name, Addr: s.Addr + i.m.Bias, Size: s.Size, Writable: s.Writable})
	}
	return out
}

func (i image) DataInts(prefix string) (map[string]int64, error) { return i.m.File.DataInts(prefix) }
func (i image) DataBytes(name string) ([]byte, error)            { return i.m.File.DataBytes(name) }

func (i image) Functions() (runtimes.Functions, bool, error) {
	syms, err := i.m.File.Symbols(i.env)
	if err != nil {
		return nil, false, err
	}
	return functions{syms: syms, bias: i.m.Bias}, strings.Contains(syms.Source, "symtab"), nil
}

// imageSymbols are one image's symbols by name, at run-time addresses.
type imageSymbols map[string]objfile.Named

func (s imageSymbols) Symbol(name string) (uint64, uint64, bool) {
	n, ok := s[name]
	return n.Addr, n.Size, ok
}

// functions are a file's functions by run-time address.
type functions struct {
	syms *objfile.Symbols
	bias uint64
}

func (f functions) FunctionAt(addr uint64) (string, bool) {
	name, _, ok := f.syms.Symbol(addr - f.bias)
	return name, ok
}

// mappings say what the target maps at an address.
type mappings struct{ space *addrspace.Space }

func (m mappings) At(addr uint64) (path string, anon, ok bool) {
	mod := m.space.ModuleAt(addr)
	if mod == nil {
		return "", false, false
	}
	return mod.Path, mod.Anon, true
}

// SetMemoryNames makes entries a source of JIT names (package jit's
// SetMemoryMap): code a reader of the target's memory named, such as the
// JVM's code cache. It is read at the next Refresh.
func (p *Process) SetMemoryNames(path string, entries []jit.MapEntry) error {
	if p.jit == nil {
		return fmt.Errorf("pid %d: no JIT sources are read", p.pid)
	}
	return p.jit.SetMemoryMap(path, entries)
}
