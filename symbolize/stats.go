package symbolize

import (
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/jit"
)

// Stats says, for a report, what symbolization could and could not use.
// Nothing is dropped silently: a mapping without symbols, hidden kernel
// addresses and addresses nobody could name are all counted here.
type Stats struct {
	Mappings []MappingStats
	// JIT describes every jitdump and perf map found for the target:
	// what was read, and what was wrong (SourceInfo.Err, Truncated).
	JIT []jit.SourceInfo
	// KernelHidden is set when the kernel printed its symbol addresses as
	// zero (kernel.kptr_restrict, or no CAP_SYSLOG): kernel frames are
	// then "[kernel]". KernelNote says so and how to fix it.
	KernelHidden bool
	KernelNote   string
	// Notes are other facts a reader should see (a vdso read from our own
	// memory, a kallsyms table that could not be read).
	Notes []string

	Locations int // distinct locations made
	Kernel    int // of which kernel frames
	JITFrames int // of which JIT frames
	Unnamed   int // in a known mapping, but no symbol names them
	Unknown   int // in no mapping we know
}

// MappingStats describes one executable mapping (or vdso) that locations
// fell in, or that was opened.
type MappingStats struct {
	File    string // as the target names it
	BuildID string
	// Symbols says which table named its functions: "symtab", "dynsym",
	// ".gnu_debugdata", "gopclntab", "build-id /usr/lib/debug/...",
	// "debuglink /path", "memory" (vdso); "" when none.
	Symbols string
	// Lines says where file and line came from: "dwarf", "dwarf
	// (debuglink /path)", "gopclntab"; "" when none.
	Lines string
	// Missing says what could not be used and why (a file that could not
	// be opened, a debug file whose CRC did not match, a stripped binary
	// without a debug file).
	Missing   []string
	Addresses int // distinct addresses located in it
	Unnamed   int // of which no symbol named
}

// Stats returns what symbolization used and missed so far, for the
// mappings that located addresses fell in.
func (p *Process) Stats() Stats {
	mods := p.space.Modules()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Notes = append([]string(nil), p.stats.Notes...)
	byFile := map[*objfile.File]int{}
	for _, mod := range mods {
		m := p.mods[mod]
		if m == nil || m.addrs == 0 {
			continue
		}
		if f := mod.File; f != nil {
			if i, ok := byFile[f]; ok {
				s.Mappings[i].Addresses += m.addrs
				s.Mappings[i].Unnamed += m.unnamed
				continue
			}
			byFile[f] = len(s.Mappings)
		}
		s.Mappings = append(s.Mappings, m.stats())
	}
	if p.opts.JIT != nil {
		s.JIT = p.opts.JIT.Sources()
	}
	return s
}

func (m *mapping) stats() MappingStats {
	ms := MappingStats{File: m.pub.File, BuildID: m.pub.BuildID, Addresses: m.addrs, Unnamed: m.unnamed}
	mod := m.mod
	switch {
	case mod.Anon:
		ms.Missing = []string{"anonymous memory: only a JIT's jitdump or perf map can name it"}
	case mod.File == nil && mod.Err != nil:
		ms.Missing = []string{mod.Err.Error()}
	case mod.File == nil:
		ms.Missing = []string{"pseudo mapping: no symbols"}
	default:
		if mod.Err != nil {
			ms.Missing = append(ms.Missing, mod.Err.Error())
		}
		if m.syms == nil {
			break
		}
		ms.Symbols = m.syms.Source
		if o := mod.File.Origin; o != "" && ms.Symbols != "" {
			ms.Symbols += " (" + o + ")"
		}
		ms.Lines = m.syms.LineSource
		ms.Missing = append(ms.Missing, m.syms.Notes()...)
	}
	return ms
}
