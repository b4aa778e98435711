// Package kallsyms reads the kernel's symbol table, /proc/kallsyms, into an
// index that answers address → function and function → address. The table
// is read once per process and shared.
//
// With kernel.kptr_restrict set (or without CAP_SYSLOG) the kernel prints
// every address as zero: the table is then Hidden and resolves nothing, and
// callers show kernel frames as "[kernel]" with a note.
package kallsyms

import (
	"cmp"
	"fmt"
	"github.com/stallwatch/stallwatch/internal/hexnum"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Symbol is one kernel text symbol.
type Symbol struct {
	Addr   uint64
	Name   string
	Module string // "" for the kernel image, else the module's name
}

// Table is a sorted kernel symbol table.
type Table struct {
	syms   []Symbol // text symbols sorted by address
	hidden bool
	// markers bound the image's text (see Find).
	markers markers
	// byName is built by the first Addr call.
	nameOnce sync.Once
	byName   map[string]uint64
	mods     []Module // from /proc/modules, ordered by address
}

// Path is the file Load reads. Tests may point it elsewhere.
var Path = "/proc/kallsyms"

var shared struct {
	sync.Mutex
	t   *Table
	err error
}

// Load returns the shared table, reading Path on first use.
func Load() (*Table, error) {
	shared.Lock()
	defer shared.Unlock()
	if shared.t == nil && shared.err == nil {
		shared.t, shared.err = readFile(Path)
	}
	return shared.t, shared.err
}

func readFile(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	mods, err := readModules(ModulesPath)
	if err != nil {
		return nil, err
	}
	t.mods = mods
	return t, nil
}

// maxTable bounds what Parse reads (this machine's table is 5 MB; a
// kernel with every debug option, about 20 MB).
const maxTable = 256 << 20

// Parse reads a kallsyms-format table: "ADDR TYPE NAME [MODULE]".
func Parse(r io.Reader) (*Table, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTable+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTable {
		return nil, fmt.Errorf("more than %d bytes", maxTable)
	}
	// One string for the whole text: every name is a slice of it, not
	// an allocation of its own.
	text := string(b)
	t := &Table{syms: make([]Symbol, 0, strings.Count(text, "\n")+1)}
	nonzero := false
	lines := 0
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		lines++
		addrField, rest := nextField(line)
		typ, rest := nextField(rest)
		name, rest := nextField(rest)
		mod, _ := nextField(rest)
		if len(name) == 0 || len(typ) != 1 {
			continue
		}
		addr, ok := hexnum.Parse(addrField)
		if !ok {
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		switch typ[0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		s := Symbol{Addr: addr, Name: name, Module: strings.Trim(mod, "[]")}
		t.syms = append(t.syms, s)
		t.noteMarker(s)
	}
	if lines > 0 && !nonzero {
		t.hidden = true
		t.syms = nil
		t.markers = markers{}
		return t, nil
	}
	t.syms = slices.Clip(t.syms)
	slices.SortFunc(t.syms, func(a, b Symbol) int {
		if c := cmp.Compare(a.Addr, b.Addr); c != 0 {
			return c
		}
		if c := cmp.Compare(namePreference(a.Name), namePreference(b.Name)); c != 0 {
			return c
		}
		return cmp.Compare(b.Name, a.Name) // any fixed order: Lookup takes the last
	})
	return t, nil
}

// nextField splits the first space- or tab-separated field off s.
func nextField(s string) (field, rest string) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	j := i
	for j < len(s) && s[j] != ' ' && s[j] != '\t' {
		j++
	}
	return s[i:j], s[j:]
}

// markers are the image's section bounds, kept while parsing so that
// Find need not build the name index.
type markers struct {
	stext, etext, sinittext, einittext uint64
}

func (t *Table) noteMarker(s Symbol) {
	if s.Module != "" {
		return
	}
	switch s.Name {
	case "_stext":
		t.markers.stext = s.Addr
	case "_etext":
		t.markers.etext = s.Addr
	case "_sinittext":
		t.markers.sinittext = s.Addr
	case "_einittext":
		t.markers.einittext = s.Addr
	}
}

// namePreference ranks names that share an address: Lookup returns the
// last of them, so the name a person expects ranks highest. Section
// markers (_stext, _text) and call-padding prefixes (__pfx_) rank low.
func namePreference(name string) int {
	switch {
	case strings.HasPrefix(name, "__pfx_"):
		return 0
	case strings.HasPrefix(name, "_"):
		return 1
	}
	return 2
}

// Hidden reports that the kernel hid its addresses (kptr_restrict).
func (t *Table) Hidden() bool { return t.hidden }

// Len is the number of text symbols.
func (t *Table) Len() int { return len(t.syms) }

// Lookup returns the symbol containing addr: the last symbol at or below it.
// Kernel text addresses are above 0xffff800000000000 on x86-64; anything
// below the first symbol is not found.
func (t *Table) Lookup(addr uint64) (Symbol, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].Addr > addr })
	if i == 0 {
		return Symbol{}, false
	}
	return t.syms[i-1], true
}

// Addr returns the address of the named text symbol (the first of that
// name). The name index is built on first use: symbolizing samples needs
// only addresses.
func (t *Table) Addr(name string) (uint64, bool) {
	t.nameOnce.Do(func() {
		t.byName = make(map[string]uint64, len(t.syms))
		for _, s := range t.syms {
			if _, dup := t.byName[s.Name]; !dup {
				t.byName[s.Name] = s.Addr
			}
		}
	})
	a, ok := t.byName[name]
	return a, ok
}
