package symbolize

import (
	"fmt"
	"math"

	"github.com/stallwatch/stallwatch/jit"
)

// jitProcess reads the target's jitdumps and perf map through package jit.
type jitProcess struct {
	p  *jit.Process
	ix *jit.Index // replaced at each update: an Index never changes
}

func openJIT(pid int) (*jitProcess, error) {
	p, err := jit.OpenProcess(pid, jit.Options{})
	if err != nil {
		return nil, err
	}
	return &jitProcess{p: p, ix: p.Index()}, nil
}

// lookupAt returns the code live at addr at CLOCK_MONOTONIC time t (0:
// the latest).
func (j *jitProcess) lookupAt(addr, t uint64) (*jit.Symbol, bool) {
	if t == 0 {
		t = math.MaxUint64
	}
	return j.ix.LookupAt(addr, t)
}

// update reads what the files gained since.
func (j *jitProcess) update() error {
	err := j.p.Update()
	j.ix = j.p.Index()
	return err
}

func (j *jitProcess) sources() []JITSource {
	var out []JITSource
	for _, s := range j.p.Sources() {
		js := JITSource{Path: s.Path, Kind: s.Kind.String(), Runtime: s.Runtime.String(), Symbols: s.Symbols}
		switch {
		case s.Refused:
			js.Err = "refused: " + s.Reason
		case s.Broken != nil:
			js.Err = s.Broken.Error()
		case len(s.Problems) > 0:
			js.Err = fmt.Sprintf("%d bad records, first: %v", s.Bad, s.Problems[0])
		}
		out = append(out, js)
	}
	return out
}

func (j *jitProcess) close() error { return j.p.Close() }

// jitLocation makes (once per address and code) the location of JIT code.
func (p *Process) jitLocation(a Addr, s *jit.Symbol) *Location {
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
		p.jitMap = &Mapping{File: "[jit]", Kind: KindJIT, HasFunctions: true}
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
	loc := &Location{Addr: a.PC, Mapping: p.jitMap, Kind: KindJIT,
		Lines: []Line{{Function: name, SystemName: s.Name, File: s.File, Line: int64(s.Line)}}}
	if !ok {
		byPC[a.PC] = jitEntry{sym: s, loc: loc}
	} else {
		p.jitMore[key] = loc
	}
	p.stats.Locations++
	p.stats.JITFrames++
	return loc
}
