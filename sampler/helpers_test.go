package sampler

import (
	"debug/elf"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stallwatch/stallwatch/internal/kallsyms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// Targets are built once per test binary and shared by the tests.
var (
	binDir  string
	binMu   sync.Mutex
	binPath = map[string]string{}
)

func TestMain(m *testing.M) {
	if runChild() {
		return
	}
	dir, err := os.MkdirTemp("", "sampler-targets-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	testutil.Main(m, func() { os.RemoveAll(dir) })
}

// target builds testdata/<name> (a Go directory, or a .c file) once.
func target(t testing.TB, name string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binPath[name]; ok {
		return p
	}
	out := filepath.Join(binDir, strings.TrimSuffix(filepath.Base(name), ".c"))
	var cmd *exec.Cmd
	if strings.HasSuffix(name, ".c") {
		gcc := testutil.RequireTool(t, "gcc")
		cmd = exec.Command(gcc, "-O1", "-g", "-pthread", "-fno-omit-frame-pointer", "-o", out, testutil.Testdata(t, name))
	} else {
		cmd = exec.Command("go", "build", "-o", out, ".")
		cmd.Dir = testutil.Testdata(t, name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/%s: %v\n%s", name, err, b)
	}
	binPath[name] = out
	return out
}

// symtab names addresses of one executable mapped in a process, from its
// ELF symbol table (the symbolize package is not a dependency of these
// tests).
type symtab struct {
	syms []elf.Symbol
	bias uint64
}

func loadSymtab(t testing.TB, pid int, path string) *symtab {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	st := &symtab{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			st.syms = append(st.syms, s)
		}
	}
	sort.Slice(st.syms, func(i, j int) bool { return st.syms[i].Value < st.syms[j].Value })
	if f.Type == elf.ET_DYN {
		maps, err := procfs.ReadMaps(pid)
		if err != nil {
			t.Fatal(err)
		}
		exe, _ := procfs.Exe(pid)
		for _, m := range maps {
			if m.Path != exe || !m.Exec() {
				continue
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Off <= m.Offset && m.Offset < p.Off+p.Filesz {
					st.bias = m.Start - (p.Vaddr + (m.Offset - p.Off))
				}
			}
		}
	}
	return st
}

// name returns the function containing addr, or "".
func (st *symtab) name(addr uint64) string {
	a := addr - st.bias
	i := sort.Search(len(st.syms), func(i int) bool { return st.syms[i].Value > a }) - 1
	if i < 0 {
		return ""
	}
	s := st.syms[i]
	if s.Size > 0 && a >= s.Value+s.Size {
		return ""
	}
	return s.Name
}

// userNames names the user frames of a sample; return addresses (every
// frame but the first) are looked up at addr-1, inside the call.
func (st *symtab) userNames(s Sample) []string {
	var out []string
	for i, a := range s.Stack[s.Kernel:] {
		if i > 0 {
			a--
		}
		out = append(out, st.name(a))
	}
	return out
}

func kallsymsTable(t testing.TB) *kallsyms.Table {
	t.Helper()
	tab, err := kallsyms.Load()
	if err != nil {
		t.Fatalf("kallsyms: %v", err)
	}
	if tab.Hidden() {
		testutil.Skip(t, "kernel addresses are hidden (kptr_restrict): cannot name kernel frames")
	}
	return tab
}

// testLogger logs through t at debug level.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
