package target

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
	v8 "github.com/stallwatch/stallwatch/runtimes/v8"
)

// V8 is the target's V8 engine (Node.js): the layout its binary
// publishes, and what tells V8's code from the rest at an address.
type V8 struct {
	Layout *v8.Layout
	space  *addrspace.Space
	file   *objfile.File    // the binary that holds V8
	syms   *objfile.Symbols // its symbols; builtins are told by name
	// named: syms has the static symbol table, where V8's builtins are
	// named (Builtins_*); without it, a pc in the binary is V8's C++ or
	// a builtin, which only the frame's own contents can tell.
	named bool
}

// v8Runtime is the target's V8, found once.
type v8Runtime struct {
	once sync.Once
	v    *V8
	err  error
}

// V8 returns the target's V8, found at the first call (before any stop:
// its binary's symbols are loaded then): v8.ErrNotV8 for a process that
// runs none, a *v8.LayoutError for a build the reader cannot read.
func (p *Process) V8() (*V8, error) {
	p.js.once.Do(func() { p.js.v, p.js.err = openV8(p.space) })
	return p.js.v, p.js.err
}

// openV8 finds the binary holding V8 among the executable and the
// libraries named for it (libnode), and reads its layout.
func openV8(space *addrspace.Space) (*V8, error) {
	exe, _ := procfs.Exe(space.Via())
	var layoutErr error
	seen := map[*objfile.File]bool{}
	for _, m := range space.Modules() {
		if m.File == nil || seen[m.File] || m.Gone || (m.Path != exe && !strings.HasPrefix(filepath.Base(m.Path), "libnode")) {
			continue
		}
		seen[m.File] = true
		l, err := v8.LoadLayout(m.File)
		if err != nil {
			var le *v8.LayoutError
			if errors.As(err, &le) && len(le.Missing) > 0 && le.Version == (v8.Version{}) {
				continue // no V8 in this binary at all
			}
			layoutErr = err
			continue
		}
		syms, err := m.File.Symbols(space.Env())
		if err != nil {
			return nil, err
		}
		return &V8{Layout: l, space: space, file: m.File, syms: syms, named: strings.Contains(syms.Source, "symtab")}, nil
	}
	if layoutErr != nil {
		return nil, layoutErr
	}
	return nil, v8.ErrNotV8
}

// CodeAt says what code pc (a return address when ret) is in, as far as
// the target's mappings and V8's binary tell: false when it is no code of
// V8's (another library, V8's own C++).
func (v *V8) CodeAt(pc uint64, ret bool) (v8.Code, bool) {
	m := v.space.ModuleAt(pc)
	switch {
	case m == nil:
		return 0, false
	case m.Anon:
		return v8.CodeJIT, true
	case m.File != v.file:
		return 0, false
	case !v.named:
		return v8.CodeUnknown, true
	}
	look := pc - m.Bias
	if ret {
		look--
	}
	// A return address just past a builtin's last call may be the first
	// byte of the next symbol: look up the call's own byte.
	name, _, ok := v.syms.Symbol(look)
	if ok && strings.HasPrefix(name, "Builtins_") {
		return v8.CodeBuiltins, true
	}
	return 0, false
}
