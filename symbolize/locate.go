package symbolize

import (
	"fmt"
	"path"

	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
)

// Locate resolves one address. It never returns nil: an address nobody
// can name becomes an explicit "file+0xoffset" or "[unknown] 0xaddr"
// frame. Results are cached: the same address gives the same *Location
// (for JIT code, the same address and the same code).
func (p *Process) Locate(a Addr) *model.Location {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.locate(a)
}

func (p *Process) locate(a Addr) *model.Location {
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
		if p.jitIx != nil {
			p.timed = true // the JIT index answers by the time
		}
		if s, ok := p.jitAt(lookupPC(a), a.Time); ok {
			return p.jitLocation(a, s)
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
func (p *Process) LocateStack(out []*model.Location, stack []uint64, kernel int, t uint64) []*model.Location {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.locateStack(out, stack, kernel, t)
}

func (p *Process) locateStack(out []*model.Location, stack []uint64, kernel int, t uint64) []*model.Location {
	n := len(out)
	for i, pc := range stack {
		a := Addr{PC: pc, Time: t, Kernel: i < kernel, Return: i != 0 && i != kernel}
		out = append(out, p.locate(a))
	}
	user := n + min(kernel, len(stack))
	return append(out[:user], trimOutermost(out[user:])...)
}

// LocateSample is LocateStack for a sample whose user stack was unwound
// with cut saying why it ends: when it ends before the thread's first
// function, a last pseudo-frame says why (see CutLocation), so that flame
// graphs show the loss instead of hiding it.
func (p *Process) LocateSample(out []*model.Location, stack []uint64, kernel int, t uint64, cut unwind.Cut) []*model.Location {
	out, _ = p.LocateSampleTimed(out, stack, kernel, t, cut)
	return out
}

// LocateSampleTimed is LocateSample, and says whether the sample's time
// chose any of the locations (JIT code, or an address only the JIT index
// could have named): where it did not, the same stack, kernel count and
// cut give the same locations at any time, until a Trim.
func (p *Process) LocateSampleTimed(out []*model.Location, stack []uint64, kernel int, t uint64, cut unwind.Cut) (_ []*model.Location, timed bool) {
	n := len(out)
	p.mu.Lock()
	p.timed = false
	out = p.locateStack(out, stack, kernel, t)
	timed = p.timed
	p.mu.Unlock()
	if len(out)-n > min(kernel, len(stack)) {
		out = p.EndStack(out, cut)
	}
	return out, timed
}

// EndStack appends to a user stack (innermost first) the pseudo-frame of
// cut when the walk that found it ended before the thread's first
// function: its outermost frame is not one a thread starts in, and cut
// says why it could go no further.
func (p *Process) EndStack(stack []*model.Location, cut unwind.Cut) []*model.Location {
	if !cut.Truncated() || len(stack) > 0 && Outermost(stack[len(stack)-1]) {
		return stack
	}
	return append(stack, p.CutLocation(cut))
}

// CutLocation is the pseudo-frame that ends a stack cut short, named
// "[truncated: why]": "[truncated: no unwind info in libfoo.so]",
// "[truncated: stack copy of 16 KiB exhausted]". It has no mapping and
// address 0 (IsCut reports it).
func (p *Process) CutLocation(c unwind.Cut) *model.Location {
	p.mu.Lock()
	defer p.mu.Unlock()
	if loc, ok := p.cuts[c]; ok {
		return loc
	}
	name := model.CutPrefix + c.String() + "]"
	loc := &model.Location{Kind: model.KindUnknown, Lines: []model.Line{{Function: name, SystemName: name}}}
	if p.cuts == nil {
		p.cuts = map[unwind.Cut]*model.Location{}
	}
	p.cuts[c] = loc
	return loc
}

// IsCut reports whether l is a pseudo-frame of CutLocation.
func IsCut(l *model.Location) bool {
	return l.IsCut()
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
	mod := p.space.ModuleAt(pc)
	if mod == nil {
		return cached{loc: unknownLocation(a.PC), miss: true}
	}
	m := p.state(mod)
	m.addrs++
	syms := m.symbols(p.env)
	if syms == nil {
		name := m.pub.File
		if mod.IsFile() || mod.File != nil {
			name = path.Base(mod.Path) + fmt.Sprintf("+%#x", pc-mod.Start+mod.Offset)
		} else {
			name = fmt.Sprintf("%s %#x", name, a.PC)
		}
		loc := &model.Location{Addr: a.PC, Mapping: m.pub, Kind: m.pub.Kind, Lines: []model.Line{{Function: name}}}
		return cached{loc: loc, miss: true, m: m}
	}
	vaddr := pc - mod.Bias
	lines := nativeLines(syms, vaddr)
	if len(lines) == 0 {
		lines = []model.Line{{Function: fmt.Sprintf("%s+%#x", path.Base(mod.Path), vaddr)}}
		loc := &model.Location{Addr: a.PC, Mapping: m.pub, Kind: model.KindNative, Lines: lines}
		return cached{loc: loc, miss: true, m: m}
	}
	return cached{loc: &model.Location{Addr: a.PC, Mapping: m.pub, Kind: model.KindNative, Lines: lines}}
}

func unknownLocation(pc uint64) *model.Location {
	return &model.Location{Addr: pc, Kind: model.KindUnknown, Lines: []model.Line{{Function: fmt.Sprintf("[unknown] %#x", pc)}}}
}

// nativeLines names vaddr in a file: the symbol that holds it, and when
// the file has them, the inlined calls and source positions.
func nativeLines(syms *objfile.Symbols, vaddr uint64) []model.Line {
	frames := syms.Frames(vaddr)
	if len(frames) == 0 {
		return nil
	}
	out := make([]model.Line, len(frames))
	for i, f := range frames {
		name := f.Func
		if name == "" {
			name = "[inlined]"
		}
		out[i] = line(name, f.File, f.Line)
	}
	return out
}

func line(raw, file string, ln int64) model.Line {
	return model.Line{Function: runtimes.Demangle(raw), SystemName: raw, File: file, Line: ln}
}
