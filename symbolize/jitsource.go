package symbolize

import "fmt"

// jitSource is what symbolize needs of the target's JIT symbol files
// (package jit, wired in jit.go).
type jitSource interface {
	// lookupAt returns the code live at addr at CLOCK_MONOTONIC time t
	// (0: the latest).
	lookupAt(addr, t uint64) (jitCode, bool)
	// update reads what the files gained since.
	update() error
	sources() []JITSource
	close() error
}

// jitCode is one piece of JIT code, as a location needs it.
type jitCode struct {
	id      any // identifies the code: same id, same location
	start   uint64
	raw     string // as the runtime wrote it
	display string // what a person reads (jit.DisplayName)
	file    string
	line    int64
}

// jitLocation makes (once per address and code) the location of JIT code.
func (p *Process) jitLocation(a Addr, c jitCode) *Location {
	key := jitKey{pc: a.PC, ret: a.Return, id: c.id}
	if loc, ok := p.jitLocs[key]; ok {
		return loc
	}
	if p.jitMap == nil {
		p.jitMap = &Mapping{File: "[jit]", Kind: KindJIT, HasFunctions: true}
	}
	if c.file != "" {
		p.jitMap.HasFilenames = true
	}
	if c.line > 0 {
		p.jitMap.HasLineNumbers = true
	}
	name := c.display
	if name == "" {
		name = c.raw
	}
	if name == "" {
		name = fmt.Sprintf("[jit] %#x", c.start)
	}
	loc := &Location{Addr: a.PC, Mapping: p.jitMap, Kind: KindJIT,
		Lines: []Line{{Function: name, SystemName: c.raw, File: c.file, Line: c.line}}}
	p.jitLocs[key] = loc
	p.stats.Locations++
	p.stats.JITFrames++
	return loc
}
