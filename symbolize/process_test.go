package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// TestCPlusPlus: C++ names are demangled as gdb prints them — binutils'
// c++filt's name without its parameters — and the mangled name is kept.
func TestCPlusPlus(t *testing.T) {
	bin := cProg(t, "g++", "prog.cpp")
	filt := testutil.RequireTool(t, "c++filt")
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, testOptions{})
	for _, tc := range []struct{ which, fn, sys string }{
		{"spin", "stall::Worker::spin", "_ZN5stall6Worker4spinEi"},
		{"visit", "stall::Worker::visit<long>", "_ZN5stall6Worker5visitIlEEPv"},
	} {
		f := tg.field(t, "ret "+tc.which)
		loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true})
		ln := loc.Lines[len(loc.Lines)-1]
		if !strings.Contains(ln.Function, tc.fn) || !strings.HasPrefix(ln.SystemName, tc.sys) {
			t.Errorf("Locate(%s) = %s\nwant %s... (%s...)", tc.which, describe(loc), tc.fn, tc.sys)
			continue
		}
		out, err := exec.Command(filt, "--no-params", ln.SystemName).Output()
		must(t, err)
		if want := strings.TrimSpace(string(out)); ln.Function != want {
			t.Errorf("Locate(%s) = %q, c++filt --no-params says %q", tc.which, ln.Function, want)
		}
	}
}

// TestGoBinary checks against what the Go runtime itself says of its
// return addresses: function, file and line, inlined calls included;
// and, built with -s -w (no symbols, no DWARF), from the pclntab alone.
func TestGoBinary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  []string
		source string
	}{
		{"default", nil, "dwarf"},
		{"stripped", []string{"-ldflags=-s -w"}, "gopclntab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := goProg(t, tc.flags...)
			tg := startTarget(t, bin)
			p := newTestProcess(t, tg.Pid, testOptions{})
			n := 0
			for _, l := range tg.lines {
				if !strings.HasPrefix(l, "ret ") {
					continue
				}
				parts := strings.Split(strings.TrimPrefix(l, "ret "), " | ")
				pc, first, _ := strings.Cut(parts[0], " ")
				parts[0] = first
				loc := p.Locate(Addr{PC: hexArg(t, pc), Return: true})
				want := parts
				if tc.source == "gopclntab" {
					// The pclntab's line is the innermost; debug/gosym
					// names the function that holds the code.
					f := strings.Fields(parts[0])
					last := strings.Fields(parts[len(parts)-1])
					want = []string{last[0] + " " + f[1] + " " + f[2]}
				}
				if len(loc.Lines) != len(want) {
					t.Errorf("Locate(%s) = %s\nwant %q", pc, describe(loc), want)
					continue
				}
				for i, w := range want {
					ln := loc.Lines[i]
					if got := ln.Function + " " + ln.File + " " + strconv.FormatInt(ln.Line, 10); got != w {
						t.Errorf("Locate(%s) line %d = %q, want %q", pc, i, got, w)
					}
				}
				n++
			}
			if n < 2 {
				t.Fatalf("the target printed %d return addresses:\n%s", n, strings.Join(tg.lines, "\n"))
			}
			st := p.Stats()
			if len(st.Mappings) != 1 || st.Mappings[0].Lines != tc.source {
				t.Errorf("Stats: %+v, want lines from %s", st.Mappings, tc.source)
			}
		})
	}
}

// TestDeletedBinary: a binary deleted while it runs (an upgrade) is read
// through /proc/<pid>/map_files.
func TestDeletedBinary(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "deleted")
	testutil.CopyExecutable(t, cProg(t, "gcc", "prog.c"), bin)
	tg := startTarget(t, bin)
	must(t, os.Remove(bin))
	p := newTestProcess(t, tg.Pid, testOptions{})
	f := tg.field(t, "ret")
	if loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true}); loc.Name() != "outer_function" || loc.Lines[0].Line != atoi(t, f[4]) {
		t.Fatalf("Locate in a deleted binary = %s", describe(loc))
	}
}

// TestReplacedBinary: a file replaced on disk after the target mapped it
// (same path, another inode) is not read by path: its symbols would be
// another build's.
func TestReplacedBinary(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "replaced")
	testutil.CopyExecutable(t, cProg(t, "gcc", "prog.c"), bin)
	tg := startTarget(t, bin)
	testutil.CopyExecutable(t, cProg(t, "gcc", "prog.c", "-O2"), bin+".new")
	must(t, os.Rename(bin+".new", bin))
	p := newTestProcess(t, tg.Pid, testOptions{})
	f := tg.field(t, "ret")
	if loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true}); loc.Name() != "outer_function" || loc.Lines[0].Line != atoi(t, f[4]) {
		t.Fatalf("Locate in a replaced binary = %s", describe(loc))
	}
}

// TestRefreshKeepsUnmapped: code that ran in a shared object unloaded
// before the end of the capture still resolves after Refresh.
func TestRefreshKeepsUnmapped(t *testing.T) {
	gcc := testutil.RequireTool(t, "gcc")
	lib := built(t, "plugin", func(dir string) (string, error) {
		out := filepath.Join(dir, "libplugin.so")
		return out, run(dir, gcc, "-O1", "-g", "-shared", "-fPIC", "-o", out, testutil.Testdata(t, "symbols", "plugin.c"))
	})
	bin := cProg(t, "gcc", "dlopen.c", "-ldl")
	cmd := exec.Command(bin, lib)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	tg := testutil.StartCmd(t, cmd)
	line := tg.WaitLine(t, "ret ", 30*time.Second)
	pc := hexArg(t, strings.Fields(line)[2])
	tg.WaitLine(t, "ready", 10*time.Second)

	p := newTestProcess(t, tg.Pid, testOptions{})
	if _, err := stdin.Write([]byte("close\n")); err != nil {
		t.Fatal(err)
	}
	tg.WaitLine(t, "closed", 10*time.Second)
	if err := p.Refresh(); err != nil {
		t.Fatal(err)
	}
	maps, err := procfs.ReadMaps(tg.Pid)
	must(t, err)
	for _, m := range maps {
		if m.Path == lib {
			t.Fatalf("%s is still mapped after dlclose: the test proves nothing", lib)
		}
	}
	loc := p.Locate(Addr{PC: pc, Return: true})
	if loc.Name() != "plugin_work" || loc.Mapping == nil || loc.Mapping.File != lib {
		t.Fatalf("Locate in an unloaded library = %s, want plugin_work in %s", describe(loc), lib)
	}
	if loc.Lines[0].Line != lineOf(t, testutil.Testdata(t, "symbols", "plugin.c"), "return plugin_where();") {
		t.Errorf("line: %s", describe(loc))
	}
}

// TestVDSO names code in the vdso from the image in the target's memory.
func TestVDSO(t *testing.T) {
	bin := cProg(t, "gcc", "prog.c")
	tg := startTarget(t, bin)
	maps, err := procfs.ReadMaps(tg.Pid)
	must(t, err)
	var vdso procfs.Mapping
	for _, m := range maps {
		if m.Path == "[vdso]" {
			vdso = m
		}
	}
	if vdso.Start == 0 {
		testutil.Skip(t, "no [vdso] in the target's maps on this machine")
	}
	// The truth, independently: the vdso is linked at 0 and mapped whole,
	// so a symbol's address is the mapping's start plus its value.
	img := make([]byte, vdso.End-vdso.Start)
	_, err = addrspace.NewMemory(tg.Pid).ReadAt(img, vdso.Start)
	must(t, err)
	ef, err := elf.NewFile(bytes.NewReader(img))
	must(t, err)
	syms, err := ef.DynamicSymbols()
	must(t, err)
	var want elf.Symbol
	for _, s := range syms {
		if s.Name == "__vdso_clock_gettime" {
			want = s
		}
	}
	if want.Value == 0 {
		t.Fatalf("no __vdso_clock_gettime in the vdso's symbols")
	}
	p := newTestProcess(t, tg.Pid, testOptions{})
	loc := p.Locate(Addr{PC: vdso.Start + want.Value + 4})
	if n := loc.Name(); n != "clock_gettime" && n != "__vdso_clock_gettime" {
		t.Fatalf("Locate(in clock_gettime) = %s", describe(loc))
	}
	if loc.Mapping == nil || loc.Mapping.File != "[vdso]" {
		t.Errorf("mapping: %s", describe(loc))
	}
}

// TestFileCacheAcrossProcesses: a second Process for a target (the next
// capture) reuses the tables read for the first, gives the same answers,
// and neither leaves a descriptor open after Close.
func TestFileCacheAcrossProcesses(t *testing.T) {
	bin := cProg(t, "gcc", "prog.c")
	tg := startTarget(t, bin)
	f := tg.field(t, "inl")
	a := Addr{PC: hexArg(t, f[1]), Return: true}
	fds := testutil.OpenFDs(t)

	symbolsOf := func(p *testProcess) *objfile.Symbols {
		m := p.space.ModuleAt(a.PC)
		if m == nil || m.File == nil {
			t.Fatalf("no file mapped at %#x", a.PC)
		}
		s, err := m.File.Symbols(p.space.Env())
		must(t, err)
		return s
	}
	p1, err := openTest(tg.Pid, testOptions{})
	must(t, err)
	first := p1.Locate(a)
	syms1 := symbolsOf(p1)
	must(t, p1.Close())

	p2, err := openTest(tg.Pid, testOptions{})
	must(t, err)
	second := p2.Locate(a)
	syms2 := symbolsOf(p2)
	st := p2.Stats()
	must(t, p2.Close())

	if syms1 != syms2 {
		t.Errorf("the second Process read %s again", bin)
	}
	if describe(first) != describe(second) || len(second.Lines) != 2 {
		t.Errorf("first %s\nsecond %s", describe(first), describe(second))
	}
	if len(st.Mappings) != 1 || st.Mappings[0].Symbols != "symtab" || st.Mappings[0].Lines != "dwarf" {
		t.Errorf("Stats of the cached file: %+v", st.Mappings)
	}
	if now := testutil.OpenFDs(t); now != fds {
		t.Errorf("%d descriptors open before, %d after both Processes closed", fds, now)
	}
}

// TestNewProcessErrors: a target that does not exist is an error that
// names it; as an unprivileged user, another user's target is a
// permission error that says what to grant.
func TestNewProcessErrors(t *testing.T) {
	_, err := openTest(1<<22+12345, testOptions{})
	if err == nil || !strings.Contains(err.Error(), "4206649") {
		t.Errorf("openTest(no such pid) = %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	// As nobody, root's process 1 is out of reach. The test binary is
	// copied where nobody may run it.
	dir, err := os.MkdirTemp("", "symbolize-nobody-")
	must(t, err)
	defer os.RemoveAll(dir)
	must(t, os.Chmod(dir, 0o755))
	self := filepath.Join(dir, "symbolize.test")
	testutil.CopyExecutable(t, os.Args[0], self)
	cmd := exec.Command(self)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SYMBOLIZE_AS_NOBODY=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "perms.Error") || !strings.Contains(string(out), "CAP_SYS_PTRACE") {
		t.Errorf("the error as nobody does not say what to grant:\n%s", out)
	}
}

func TestTrimOutermost(t *testing.T) {
	mk := func(names ...string) []*model.Location {
		var out []*model.Location
		for _, n := range names {
			out = append(out, &model.Location{Kind: model.KindNative, Lines: []model.Line{{Function: n}}})
		}
		return out
	}
	names := func(ls []*model.Location) string {
		var s []string
		for _, l := range ls {
			s = append(s, l.Name())
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct{ in, want string }{
		{"main.futex main.worker runtime.goexit.abi0 main.reconcile runtime.goexit.abi0", "main.futex main.worker runtime.goexit.abi0"},
		{"__lll_lock_wait worker start_thread clone3 garbage", "__lll_lock_wait worker start_thread clone3"},
		{"runtime.futex runtime.mstart runtime.clone.abi0 x", "runtime.futex runtime.mstart runtime.clone.abi0"},
		{"main main.x", "main main.x"},
	} {
		if got := names(trimOutermost(mk(strings.Fields(tc.in)...))); got != tc.want {
			t.Errorf("trimOutermost(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	// A kernel function of the same name does not end a stack.
	if Outermost(&model.Location{Kind: model.KindKernel, Lines: []model.Line{{Function: "clone"}}}) {
		t.Error("kernel clone taken for the outermost user frame")
	}
}
