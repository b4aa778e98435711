package target

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes/hotspot"
)

// jvm is the target's HotSpot VM, found once.
type jvm struct {
	once sync.Once
	j    *JVM
	err  error
}

// JVM is a HotSpot VM's memory and its libjvm.so's layout, read once per
// target: what package runtimes/hotspot reads the VM's Java threads, its
// flags and its code cache through.
type JVM struct {
	// Path is libjvm.so as the target maps it.
	Path   string
	mem    hotspot.Memory
	syms   jvmSymbols
	layout *hotspot.Layout
}

// JVM returns the target's HotSpot VM, found at the first call: an error
// wrapping hotspot.ErrNotHotSpot for a process that maps no libjvm.so
// with the VMStructs tables, a *hotspot.MissingError for a HotSpot whose
// layout the reader does not know.
func (p *Process) JVM() (*JVM, error) {
	p.jvm.once.Do(func() { p.jvm.j, p.jvm.err = openJVM(p) })
	return p.jvm.j, p.jvm.err
}

func openJVM(p *Process) (*JVM, error) {
	for _, m := range p.space.Modules() {
		if m.File == nil || m.Gone || !strings.HasPrefix(filepath.Base(m.Path), "libjvm.") {
			continue
		}
		names, err := m.File.LookupNames(hotspot.SymbolNames())
		if err != nil && len(names) == 0 {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		j := &JVM{Path: m.Path, mem: p.space.Memory(), syms: jvmSymbols{}}
		for n, s := range names {
			j.syms[n] = objfile.Named{Addr: s.Addr + m.Bias, Size: s.Size}
		}
		j.layout, err = hotspot.ReadLayout(hotspot.NewReader(j.mem, hotspot.Limits{}), j.syms)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		if _, err := j.VM(); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		return j, nil
	}
	return nil, fmt.Errorf("pid %d maps no libjvm.so: %w", p.pid, hotspot.ErrNotHotSpot)
}

// VM starts one reading of the VM: what it reads, it reads fresh.
func (j *JVM) VM() (*hotspot.VM, error) {
	return hotspot.NewVM(hotspot.NewReader(j.mem, hotspot.Limits{}), j.syms, j.layout)
}

// Flag reads one of the VM's bool -XX flags as it has it now.
func (j *JVM) Flag(name string) (bool, error) {
	vm, err := j.VM()
	if err != nil {
		return false, err
	}
	return vm.BoolFlag(name)
}

// jvmSymbols are libjvm's symbols by name, at run-time addresses.
type jvmSymbols map[string]objfile.Named

func (s jvmSymbols) Symbol(name string) (uint64, uint64, bool) {
	n, ok := s[name]
	return n.Addr, n.Size, ok
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

// CodeCacheNames reads the JVM's code cache: every compiled method and
// stub, named as its own perf map would name them.
func (j *JVM) CodeCacheNames() ([]jit.MapEntry, error) {
	vm, err := j.VM()
	if err != nil {
		return nil, err
	}
	cc, err := vm.CodeCache()
	if err != nil {
		return nil, err
	}
	out := make([]jit.MapEntry, 0, len(cc.Blobs))
	for _, b := range cc.Blobs {
		if b.End > b.Start {
			out = append(out, jit.MapEntry{Start: b.Start, Size: b.End - b.Start, Name: b.Name})
		}
	}
	return out, cc.Err
}

// javaLocs interns the locations of Java frames: one *Location per method
// and line, as the symbolizer has one per address, so that renderings
// (pprof's locations by pointer) merge them.
type javaLocs struct {
	mu   sync.Mutex
	locs map[javaKey]*model.Location
}

type javaKey struct {
	method uint64
	name   string
	line   int
}

// maxJavaLocs bounds the locations remembered; past it they start over
// (locations already returned stay valid).
const maxJavaLocs = 1 << 16

var javaMapping = &model.Mapping{File: model.JavaMapping, Kind: model.KindJIT, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}

// JavaLocation is the location of one Java frame: its method as jstack
// names it ("Ledger.settleChecking"), its source file and line; kind jit,
// in the pseudo mapping "[java]", its address the Method's.
func (p *Process) JavaLocation(f hotspot.Frame) *model.Location {
	if f.Method == nil {
		return nil
	}
	k := javaKey{method: f.Method.Addr, name: f.Method.String(), line: f.Line}
	p.javaLocs.mu.Lock()
	defer p.javaLocs.mu.Unlock()
	if l := p.javaLocs.locs[k]; l != nil {
		return l
	}
	if p.javaLocs.locs == nil || len(p.javaLocs.locs) >= maxJavaLocs {
		p.javaLocs.locs = map[javaKey]*model.Location{}
	}
	system := f.Method.String()
	if f.Method.Signature != "" {
		system = f.Method.PerfMapName()
	}
	l := &model.Location{
		Addr: f.Method.Addr, Mapping: javaMapping, Kind: model.KindJIT,
		Lines: []model.Line{{Function: f.Method.String(), SystemName: system, File: f.Method.File, Line: int64(f.Line)}},
	}
	p.javaLocs.locs[k] = l
	return l
}
