package kallsyms

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Module is one loaded kernel module, from /proc/modules.
type Module struct {
	Name string
	Addr uint64 // 0 when the kernel hides addresses
	Size uint64
}

// Contains reports whether addr is inside the module's core image.
func (m Module) Contains(addr uint64) bool {
	return m.Addr != 0 && addr >= m.Addr && addr-m.Addr < m.Size
}

// ModulesPath is the file Load reads module ranges from. A missing file
// (a kernel without module support) means no modules.
var ModulesPath = "/proc/modules"

// ParseModules reads a /proc/modules-format table:
// "NAME SIZE REFCOUNT DEPS STATE ADDR [TAINT]". Lines it cannot read are
// skipped: the kernel writes this file, a line we do not understand is a
// newer format, not an attack.
func ParseModules(r io.Reader) ([]Module, error) {
	var mods []Module
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 16<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		size, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimPrefix(f[5], "0x"), 16, 64)
		if err != nil {
			continue
		}
		mods = append(mods, Module{Name: f[0], Addr: addr, Size: size})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Addr < mods[j].Addr })
	return mods, nil
}

func readModules(path string) ([]Module, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mods, err := ParseModules(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return mods, nil
}

// ParseWithModules reads a kallsyms table and, when modules is not nil, a
// /proc/modules table that bounds module symbols (see Find).
func ParseWithModules(kallsyms, modules io.Reader) (*Table, error) {
	t, err := Parse(kallsyms)
	if err != nil {
		return nil, err
	}
	if modules != nil {
		mods, err := ParseModules(modules)
		if err != nil {
			return nil, fmt.Errorf("modules: %w", err)
		}
		t.mods = mods
	}
	return t, nil
}

// Modules returns the loaded modules, ordered by address.
func (t *Table) Modules() []Module { return t.mods }

// Module returns the module that holds addr.
func (t *Table) Module(addr uint64) (Module, bool) {
	i := sort.Search(len(t.mods), func(i int) bool { return t.mods[i].Addr > addr })
	if i > 0 && t.mods[i-1].Contains(addr) {
		return t.mods[i-1], true
	}
	return Module{}, false
}

// Text returns the bounds of the kernel image's text, [_stext, _etext),
// or zeros when the table does not say.
func (t *Table) Text() (start, end uint64) {
	if t.markers.stext == 0 || t.markers.etext <= t.markers.stext {
		return 0, 0
	}
	return t.markers.stext, t.markers.etext
}

// maxModuleSpan bounds how far past its last symbol an address may lie and
// still be taken for module code when /proc/modules gives no range (no
// kernel function is this long; anything further is not the symbol's).
const maxModuleSpan = 1 << 20

// Find is Lookup with bounds: it refuses addresses that only look like
// they follow a symbol — past the end of the kernel's text, in a gap
// between the image and the modules, or beyond a module's core image —
// which Lookup would name after whatever symbol precedes them.
func (t *Table) Find(addr uint64) (Symbol, bool) {
	s, ok := t.Lookup(addr)
	if !ok {
		return Symbol{}, false
	}
	if s.Module == "" {
		if t.inImageText(addr) {
			return s, true
		}
		return Symbol{}, false
	}
	for _, m := range t.mods {
		if m.Name == s.Module && m.Addr != 0 {
			return s, m.Contains(addr)
		}
	}
	return s, addr-s.Addr < maxModuleSpan
}

// inImageText reports whether addr is in the image's text or init text.
func (t *Table) inImageText(addr uint64) bool {
	start, end := t.Text()
	if start == 0 {
		return true // the table has no bounds: trust Lookup
	}
	if addr >= start && addr < end {
		return true
	}
	return addr >= t.markers.sinittext && addr < t.markers.einittext
}
