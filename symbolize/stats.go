package symbolize

// Stats says, for a report, what symbolization could and could not use.
// Nothing is dropped silently: a mapping without symbols, hidden kernel
// addresses and addresses nobody could name are all counted here.
type Stats struct {
	Mappings []MappingStats
	JIT      []JITSource
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

// JITSource is one jitdump or perf map read for the target.
type JITSource struct {
	Path    string
	Kind    string // "jitdump", "perfmap"
	Runtime string
	Symbols int
	Err     string // why it was refused or what went wrong reading it
}

// Stats returns what symbolization used and missed so far, for the
// mappings that located addresses fell in.
func (p *Process) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Notes = append([]string(nil), p.stats.Notes...)
	byFile := map[*objEntry]int{}
	add := func(m *mapping) {
		if m.addrs == 0 {
			return
		}
		if m.obj != nil {
			if i, ok := byFile[m.obj]; ok {
				s.Mappings[i].Addresses += m.addrs
				s.Mappings[i].Unnamed += m.unnamed
				return
			}
			byFile[m.obj] = len(s.Mappings)
		}
		s.Mappings = append(s.Mappings, m.stats())
	}
	for _, m := range p.maps {
		add(m)
	}
	for _, m := range p.retired {
		add(m)
	}
	if p.jit != nil {
		s.JIT = p.jit.sources()
	}
	return s
}

func (m *mapping) stats() MappingStats {
	ms := MappingStats{File: m.pub.File, BuildID: m.pub.BuildID, Addresses: m.addrs, Unnamed: m.unnamed}
	switch {
	case m.anon:
		ms.Missing = []string{"anonymous memory: only a JIT's jitdump or perf map can name it"}
	case m.obj == nil:
		ms.Missing = []string{"pseudo mapping: no symbols"}
	case m.obj.o == nil:
		ms.Missing = []string{m.obj.err.Error()}
	default:
		o := m.obj.o
		ms.Symbols = o.symSource
		if o.origin != "" && ms.Symbols != "" {
			ms.Symbols += " (" + o.origin + ")"
		}
		ms.Lines = o.lineSource
		ms.Missing = append(ms.Missing, o.notes...)
	}
	return ms
}
