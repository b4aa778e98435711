// Package kallsyms reads the kernel's symbol table, /proc/kallsyms, into an
// index that answers address → function and function → address. The table
// is read once per process and shared; kernel modules loaded later are
// picked up by Reload.
//
// With kernel.kptr_restrict set (or without CAP_SYSLOG) the kernel prints
// every address as zero: the table is then Hidden and resolves nothing, and
// callers show kernel frames as "[kernel]" with a note.
package kallsyms

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
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
	byName map[string]uint64
	hidden bool
	mods   []Module // from /proc/modules, ordered by address
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

// Reload reads Path again (after a module load) and replaces the shared table.
func Reload() (*Table, error) {
	shared.Lock()
	defer shared.Unlock()
	shared.t, shared.err = readFile(Path)
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

// Parse reads a kallsyms-format table: "ADDR TYPE NAME [MODULE]".
func Parse(r io.Reader) (*Table, error) {
	t := &Table{byName: make(map[string]uint64)}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	nonzero := false
	lines := 0
	for sc.Scan() {
		lines++
		line := sc.Bytes()
		f := bytes.Fields(line)
		if len(f) < 3 || len(f[1]) != 1 {
			continue
		}
		addr, err := strconv.ParseUint(string(f[0]), 16, 64)
		if err != nil {
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		switch f[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		s := Symbol{Addr: addr, Name: string(f[2])}
		if len(f) > 3 {
			s.Module = string(bytes.Trim(f[3], "[]"))
		}
		t.syms = append(t.syms, s)
		if _, dup := t.byName[s.Name]; !dup {
			t.byName[s.Name] = addr
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if lines > 0 && !nonzero {
		t.hidden = true
		t.syms = nil
		t.byName = map[string]uint64{}
		return t, nil
	}
	sort.SliceStable(t.syms, func(i, j int) bool {
		a, b := t.syms[i], t.syms[j]
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return namePreference(a.Name) < namePreference(b.Name)
	})
	return t, nil
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

// Addr returns the address of the named text symbol.
func (t *Table) Addr(name string) (uint64, bool) {
	a, ok := t.byName[name]
	return a, ok
}
