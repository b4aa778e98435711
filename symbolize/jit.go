package symbolize

import (
	"fmt"
	"math"

	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/model"
)

// jitAt returns the JIT code live at addr at CLOCK_MONOTONIC time t (0:
// the latest).
func (p *Process) jitAt(addr, t uint64) (*jit.Symbol, bool) {
	if p.jitIx == nil {
		return nil, false
	}
	if t == 0 {
		t = math.MaxUint64
	}
	return p.jitIx.LookupAt(addr, t)
}

// jitLocation makes (once per address and code) the location of JIT code.
func (p *Process) jitLocation(a Addr, s *jit.Symbol) *model.Location {
	byPC := p.jitLocs[b2i(a.Return)]
	e, ok := byPC[a.PC]
	if ok && e.sym == s {
		return e.loc
	}
	key := jitKey{pc: a.PC, ret: a.Return, sym: s}
	if ok {
		if loc, ok := p.jitMore[key]; ok {
			return loc
		}
	}
	if p.jitMap == nil {
		p.jitMap = &model.Mapping{File: "[jit]", Kind: model.KindJIT, HasFunctions: true}
	}
	if s.File != "" {
		p.jitMap.HasFilenames = true
	}
	if s.Line > 0 {
		p.jitMap.HasLineNumbers = true
	}
	name := s.Display
	if name == "" {
		name = s.Name
	}
	if name == "" {
		name = fmt.Sprintf("[jit] %#x", s.Start)
	}
	loc := &model.Location{Addr: a.PC, Mapping: p.jitMap, Kind: model.KindJIT,
		Lines: []model.Line{{Function: name, SystemName: s.Name, File: s.File, Line: int64(s.Line)}}}
	if !ok {
		byPC[a.PC] = jitEntry{sym: s, loc: loc}
	} else {
		p.jitMore[key] = loc
	}
	p.stats.Locations++
	p.stats.JITFrames++
	return loc
}
