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

func openJIT(pid int) (jitSource, error) {
	p, err := jit.OpenProcess(pid, jit.Options{})
	if err != nil {
		return nil, err
	}
	return &jitProcess{p: p, ix: p.Index()}, nil
}

func (j *jitProcess) lookupAt(addr, t uint64) (jitCode, bool) {
	if t == 0 {
		t = math.MaxUint64
	}
	s, ok := j.ix.LookupAt(addr, t)
	if !ok {
		return jitCode{}, false
	}
	return jitCode{id: s, start: s.Start, raw: s.Name, display: s.Display, file: s.File, line: int64(s.Line)}, true
}

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
