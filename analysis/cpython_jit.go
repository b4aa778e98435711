package analysis

import (
	"fmt"
	"strings"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
)

// pyTrampolineCaller is the CPython function that calls a Python
// function's perf trampoline (Python/perf_trampoline.c, 3.12 and later):
// the frame just outside each trampoline on a native stack.
const pyTrampolineCaller = "py_trampoline_evaluator"

// unnamedPythonFrames: CPython's perf trampolines on the sampled stacks
// without names although a JIT symbol file was read. CPython 3.13's
// -X perf_jit writes its jitdump through a stdio buffer (4 KiB blocks)
// and completes it only at exit, so a live capture names only the
// functions compiled before the last block was written: the hot ones,
// compiled last, are "[anon] 0x…". -X perf's perf map is flushed at every
// function. (When stallwatch reads CPython's frames from its memory, this
// finding gives way to the names it reads.)
func (e *evidence) unnamedPythonFrames() []finding {
	if e.a == nil || !e.hasCPU || e.rt != runtimes.Python || e.info.Counts.JITSources == 0 {
		return nil // no JIT symbol file at all: missingJIT says which switch
	}
	named, unnamed := map[string]bool{}, map[string]bool{}
	var under, total int64
	for i := range e.p.Samples {
		s := &e.p.Samples[i]
		var v int64 // on-CPU time
		if !s.OffCPU {
			v = s.Nanos
		}
		total += v
		hit := false
		stack := e.a.stacks[e.a.stackOf[i]]
		for j := 0; j+1 < len(stack); j++ {
			if stack[j+1].Name != pyTrampolineCaller {
				continue
			}
			switch f := stack[j]; {
			case f.Kind == model.KindUnknown:
				unnamed[f.Name], hit = true, true
			case f.Kind == model.KindJIT:
				named[f.Name] = true
			}
		}
		if hit {
			under += v
		}
	}
	if total == 0 || float64(under) < unnamedShare*float64(total) {
		return nil
	}
	m := len(named) + len(unnamed)
	why := "CPython 3.13's -X perf_jit writes its jitdump through a buffer and completes it only when the interpreter exits"
	if e.info.Counts.JITTruncated > 0 {
		why += " (the file read here ends mid-record)"
	}
	f := e.newFinding(model.FindingMissingJITSymbols, model.SeverityInfo, float64(under)/float64(total), nil,
		fmt.Sprintf("CPython functions without names: %d of the %d Python functions on the sampled stacks are unnamed JIT frames ([anon] 0x…), under %s of the on-CPU time.",
			len(unnamed), m, strings.TrimSpace(textfmt.Pct(under, total))),
		why+": a live capture finds only the functions compiled before its last write, and the hot ones come last. "+
			"To name them all while the process runs, start it with -X perf (or PYTHONPERFSUPPORT=1): its perf map, /tmp/perf-<pid>.map, is written out at each new function.")
	f.Runtime = e.rt.ID
	return []finding{f}
}
