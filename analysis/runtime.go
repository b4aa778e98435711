package analysis

import (
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
)

// detectRuntime names the runtime a capture's process runs (package
// runtimes: nil for none it knows), from the executable's name, then from
// the libraries in the profile and in the snapshot's stacks, then from the
// functions in the profile's stacks.
func detectRuntime(info *model.Info, p *model.Profile, snap *model.Snapshot, a *stackTable) *runtimes.Runtime {
	var names []string
	if info.Executable != "" {
		names = append(names, info.Executable)
	}
	if len(info.Command) > 0 {
		names = append(names, info.Command[0])
	}
	if snap != nil && len(snap.Command) > 0 {
		names = append(names, snap.Command[0])
	}
	for _, n := range names {
		if r := runtimes.OfExecutable(n); r != nil {
			return r
		}
	}
	if p != nil {
		for _, m := range p.Mappings {
			if r := runtimes.OfLibrary(m.File); r != nil {
				return r
			}
		}
	}
	if snap != nil {
		for _, t := range snap.Threads {
			for _, l := range t.User {
				if l != nil && l.Mapping != nil {
					if r := runtimes.OfLibrary(l.Mapping.File); r != nil {
						return r
					}
				}
			}
		}
	}
	// A runtime linked into the program (Go) shows in its frames.
	if a != nil {
		for _, fr := range a.stacks {
			for _, f := range fr {
				if r := runtimes.OfFrame(f.Name); r != nil {
					return r
				}
			}
		}
	}
	return nil
}

// jitSwitch is how to start rt so that its JIT-compiled code gets names
// a profiler outside the process can read; "" for none.
func jitSwitch(rt *runtimes.Runtime) string {
	if rt == nil || rt.JIT == nil {
		return ""
	}
	return rt.JIT.Switch
}
