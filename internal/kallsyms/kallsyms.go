// Package kallsyms reads the kernel's symbol table, /proc/kallsyms, into an
// index that answers address → function and function → address. The table
// is read once per process and shared.
//
// With kernel.kptr_restrict set (or without CAP_SYSLOG) the kernel prints
// every address as zero: the table is then Hidden and resolves nothing, and
// callers show kernel frames as "[kernel]" with a note.
package kallsyms

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/stallwatch/stallwatch/internal/hexnum"
)

// Symbol is one kernel text symbol.
type Symbol struct {
	Addr   uint64
	Name   string
	Module string // "" for the kernel image, else the module's name
}

// Table is a sorted kernel symbol table. It is held for the life of the
// process, so it is laid out small: a machine's 122,000 text symbols
// take 5 MiB (their names back to back in one string, 16 bytes a symbol,
// 4 more for the name index), where Symbol values and a map by name took
// 19.5 MiB, most of an idle `watch`'s heap.
type Table struct {
	names    string   // every text symbol's name, back to back
	syms     []entry  // sorted by address
	modNames []string // entry.mod-1 indexes it; 0 is the kernel image
	hidden   bool
	// markers bound the image's text (see Find).
	markers markers
	// byName is built by the first Addr call: indices of syms sorted by
	// name, then by address.
	nameOnce sync.Once
	byName   []uint32
	mods     []Module // from /proc/modules, ordered by address
}

// entry is one text symbol: its address, its name as a slice of
// Table.names, and its module.
type entry struct {
	addr    uint64
	nameOff uint32
	nameLen uint16
	mod     uint16
}

func (t *Table) name(e entry) string { return t.names[e.nameOff : e.nameOff+uint32(e.nameLen)] }

func (t *Table) symbol(e entry) Symbol {
	s := Symbol{Addr: e.addr, Name: t.name(e)}
	if e.mod > 0 {
		s.Module = t.modNames[e.mod-1]
	}
	return s
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

// Limits of a table's layout: a name longer than KSYM_NAME_LEN (512) or a
// table of more modules than any kernel loads is not kallsyms.
const (
	maxName    = 1 << 12
	maxModules = 1<<16 - 1
)

// Parse reads a kallsyms-format table: "ADDR TYPE NAME [MODULE]", a line
// at a time (the text is not kept: only the text symbols' names are).
func Parse(r io.Reader) (*Table, error) {
	lr := &io.LimitedReader{R: r, N: maxTable + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<10)
	t := &Table{}
	var names []byte
	modIndex := map[string]uint16{}
	nonzero := false
	lines := 0
	for sc.Scan() {
		line := sc.Bytes()
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
		if len(name) > maxName {
			return nil, fmt.Errorf("line %d: a name of %d bytes", lines, len(name))
		}
		e := entry{addr: addr, nameOff: uint32(len(names)), nameLen: uint16(len(name))}
		names = append(names, name...)
		if m := bytes.Trim(mod, "[]"); len(m) > 0 {
			i, ok := modIndex[string(m)]
			if !ok {
				if len(t.modNames) == maxModules {
					return nil, fmt.Errorf("line %d: more than %d modules", lines, maxModules)
				}
				t.modNames = append(t.modNames, string(m))
				i = uint16(len(t.modNames))
				modIndex[string(m)] = i
			}
			e.mod = i
		}
		t.syms = append(t.syms, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("more than %d bytes", maxTable)
	}
	if lines > 0 && !nonzero {
		return &Table{hidden: true}, nil
	}
	t.names = string(names)       // exactly sized: the table lives as long as the process
	t.syms = slices.Clone(t.syms) // exactly sized too (Clip would keep the grown array)
	for _, e := range t.syms {
		t.noteMarker(e)
	}
	slices.SortFunc(t.syms, func(a, b entry) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		an, bn := t.name(a), t.name(b)
		if c := cmp.Compare(namePreference(an), namePreference(bn)); c != 0 {
			return c
		}
		return cmp.Compare(bn, an) // any fixed order: Lookup takes the last
	})
	return t, nil
}

// nextField splits the first space- or tab-separated field off s.
func nextField(s []byte) (field, rest []byte) {
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

func (t *Table) noteMarker(e entry) {
	if e.mod != 0 {
		return
	}
	switch t.name(e) {
	case "_stext":
		t.markers.stext = e.addr
	case "_etext":
		t.markers.etext = e.addr
	case "_sinittext":
		t.markers.sinittext = e.addr
	case "_einittext":
		t.markers.einittext = e.addr
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

// AddressesHidden reports whether the kernel shows this process its
// symbols' addresses as zero (kernel.kptr_restrict, CAP_SYSLOG), or
// Path cannot be read: what a Table read now would say with Hidden,
// from its first line alone, for a caller that asks before it needs
// the table. The kernel zeroes every address or none.
func AddressesHidden() bool {
	f, err := os.Open(Path)
	if err != nil {
		return true
	}
	defer f.Close()
	var b [256]byte
	n, _ := io.ReadFull(f, b[:])
	addrField, _ := nextField(b[:n])
	addr, ok := hexnum.Parse(addrField)
	return !ok || addr == 0
}

// Len is the number of text symbols.
func (t *Table) Len() int { return len(t.syms) }

// Lookup returns the symbol containing addr: the last symbol at or below it.
// Kernel text addresses are above 0xffff800000000000 on x86-64; anything
// below the first symbol is not found.
func (t *Table) Lookup(addr uint64) (Symbol, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > addr })
	if i == 0 {
		return Symbol{}, false
	}
	return t.symbol(t.syms[i-1]), true
}

// Addr returns the address of the named text symbol (the first of that
// name). The name index is built on first use: symbolizing samples needs
// only addresses.
func (t *Table) Addr(name string) (uint64, bool) {
	t.nameOnce.Do(func() {
		t.byName = make([]uint32, len(t.syms))
		for i := range t.byName {
			t.byName[i] = uint32(i)
		}
		slices.SortFunc(t.byName, func(a, b uint32) int {
			if c := strings.Compare(t.name(t.syms[a]), t.name(t.syms[b])); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
	})
	i := sort.Search(len(t.byName), func(i int) bool { return t.name(t.syms[t.byName[i]]) >= name })
	if i == len(t.byName) || t.name(t.syms[t.byName[i]]) != name {
		return 0, false
	}
	return t.syms[t.byName[i]].addr, true
}
