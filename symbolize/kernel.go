package symbolize

import (
	"fmt"
	"strings"

	"github.com/stallwatch/stallwatch/internal/kallsyms"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/model"
)

// KernelMappingFile is the pseudo file of kernel image locations (perf's
// and pprof's name for it).
const KernelMappingFile = "[kernel.kallsyms]"

// kernelSyms is the kernel's symbol table as this process sees it, with
// one pseudo mapping for the image and one per module.
type kernelSyms struct {
	tab    *kallsyms.Table // nil when it could not be read
	hidden bool
	note   string
	image  *model.Mapping
	mods   map[string]*model.Mapping
	usedM  map[*model.Mapping]bool
}

// loadKernelSyms reads the shared kallsyms table.
func loadKernelSyms() *kernelSyms {
	tab, err := kallsyms.Load()
	if err != nil {
		return &kernelSyms{hidden: true, note: fmt.Sprintf("kernel frames are [kernel]: cannot read kernel symbols: %v", err)}
	}
	return newKernelSyms(tab)
}

func newKernelSyms(tab *kallsyms.Table) *kernelSyms {
	ks := &kernelSyms{tab: tab, mods: map[string]*model.Mapping{}, usedM: map[*model.Mapping]bool{}}
	ks.image = &model.Mapping{File: KernelMappingFile, Kind: model.KindKernel, HasFunctions: !tab.Hidden()}
	ks.image.Start, ks.image.Limit = tab.Text()
	if tab.Hidden() {
		ks.hidden = true
		ks.note = hiddenNote()
	}
	for _, m := range tab.Modules() {
		ks.mods[m.Name] = &model.Mapping{File: "[" + m.Name + "]", Start: m.Addr, Limit: m.Addr + m.Size, Kind: model.KindKernel, HasFunctions: !tab.Hidden()}
	}
	return ks
}

// hiddenNote says why kernel addresses are hidden and how to show them,
// as the permissions table says it for this process.
func hiddenNote() string { return perms.Note(perms.KernelNames) }

// module returns the pseudo mapping of a module, made on first use.
func (ks *kernelSyms) module(name string) *model.Mapping {
	m := ks.mods[name]
	if m == nil {
		m = &model.Mapping{File: "[" + name + "]", Kind: model.KindKernel, HasFunctions: true}
		ks.mods[name] = m
	}
	return m
}

// used returns the kernel mappings that locations refer to.
func (ks *kernelSyms) used() []*model.Mapping {
	var out []*model.Mapping
	if ks.usedM[ks.image] {
		out = append(out, ks.image)
	}
	for m := range ks.usedM {
		if m != ks.image {
			out = append(out, m)
		}
	}
	return out
}

func (p *Process) locateKernel(a Addr) *model.Location {
	cache := p.kcache[b2i(a.Return)]
	if loc, ok := cache[a.PC]; ok {
		return loc
	}
	loc := p.kernelLocation(a)
	cache[a.PC] = loc
	p.stats.Locations++
	p.stats.Kernel++
	return loc
}

// kernelLocation names a kernel address. Kernel callchain entries need no
// return-address adjustment for naming here: kallsyms gives functions,
// not lines, and a call never ends a kernel function that returns.
func (p *Process) kernelLocation(a Addr) *model.Location {
	ks := p.kernel
	if ks == nil || ks.hidden || ks.tab == nil {
		m := p.kernelImage()
		return &model.Location{Addr: a.PC, Mapping: m, Kind: model.KindKernel, Lines: []model.Line{{Function: "[kernel]"}}}
	}
	pc := lookupPC(a)
	s, ok := ks.tab.Find(pc)
	if !ok {
		p.stats.Unnamed++
		ks.usedM[ks.image] = true
		return &model.Location{Addr: a.PC, Mapping: ks.image, Kind: model.KindKernel, Lines: []model.Line{{Function: fmt.Sprintf("[kernel] %#x", a.PC)}}}
	}
	m := ks.image
	if s.Module != "" {
		m = ks.module(s.Module)
	}
	ks.usedM[m] = true
	return &model.Location{Addr: a.PC, Mapping: m, Kind: model.KindKernel, Lines: []model.Line{{Function: s.Name, SystemName: s.Name}}}
}

// kernelImage is the image mapping, also when kernel symbols are off.
func (p *Process) kernelImage() *model.Mapping {
	if p.kernel == nil {
		p.kernel = &kernelSyms{hidden: true, mods: map[string]*model.Mapping{}, usedM: map[*model.Mapping]bool{},
			image: &model.Mapping{File: KernelMappingFile, Kind: model.KindKernel}}
	}
	p.kernel.usedM[p.kernel.image] = true
	return p.kernel.image
}

// LocateKernelFrame names a line of /proc/<pid>/task/<tid>/stack, which
// the kernel prints by name and offset (its address is usually 0).
func (p *Process) LocateKernelFrame(f procfs.KernelFrame) *model.Location {
	p.mu.Lock()
	defer p.mu.Unlock()
	if loc, ok := p.kframes[f]; ok {
		return loc
	}
	var m *model.Mapping
	addr := f.Addr
	mod := strings.Trim(f.Module, "[]")
	if p.kernel != nil && p.kernel.tab != nil && !p.kernel.hidden {
		if a, ok := p.kernel.tab.Addr(f.Symbol); ok && addr == 0 {
			addr = a + f.Offset
		}
	}
	if mod != "" {
		if p.kernel == nil {
			p.kernelImage()
		}
		m = p.kernel.module(mod)
		p.kernel.usedM[m] = true
	} else {
		m = p.kernelImage()
	}
	name := f.Symbol
	if name == "" {
		name = "[kernel]"
	}
	loc := &model.Location{Addr: addr, Mapping: m, Kind: model.KindKernel, Lines: []model.Line{{Function: name, SystemName: f.Symbol}}}
	p.kframes[f] = loc
	p.stats.Locations++
	p.stats.Kernel++
	return loc
}
