package symbolize

import (
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// TestCProgram resolves return addresses and function addresses that a
// live PIE program (-g) took of its own functions, and a libc function's
// address, the way a profile's stacks hold them.
func TestCProgram(t *testing.T) {
	bin := cProg(t, "gcc", "prog.c")
	if ef, err := elf.Open(bin); err != nil || ef.Type != elf.ET_DYN {
		t.Fatalf("%s is not a PIE (type %v, %v): the load-bias case is not exercised", bin, ef.Type, err)
	}
	src := testutil.Testdata(t, "symbols", "prog.c")
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, testOptions{})

	t.Run("return address", func(t *testing.T) {
		f := tg.field(t, "ret") // ret outer_function PC FILE LINE
		loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true})
		want := model.Line{Function: "outer_function", SystemName: "outer_function", File: f[3], Line: atoi(t, f[4])}
		if len(loc.Lines) != 1 || loc.Lines[0] != want {
			t.Fatalf("Locate = %s, want one line %+v", describe(loc), want)
		}
		if loc.Kind != model.KindNative || loc.Mapping == nil || loc.Mapping.File != bin {
			t.Errorf("mapping of %s, want %s", describe(loc), bin)
		}
		if again := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true}); again != loc {
			t.Error("the same address gave a new Location: not cached")
		}
	})

	t.Run("inlined", func(t *testing.T) {
		f := tg.field(t, "inl") // inl PC inlined_helper LINE holds_inline LINE
		loc := p.Locate(Addr{PC: hexArg(t, f[1]), Return: true})
		want := []model.Line{
			{Function: "inlined_helper", SystemName: "inlined_helper", File: src, Line: atoi(t, f[3])},
			{Function: "holds_inline", SystemName: "holds_inline", File: src, Line: atoi(t, f[5])},
		}
		if len(loc.Lines) != 2 || loc.Lines[0] != want[0] || loc.Lines[1] != want[1] {
			t.Fatalf("Locate = %s\nwant inlined_helper at line %s inside holds_inline at line %s", describe(loc), f[3], f[5])
		}
		if !loc.Mapping.HasInlineFrames || !loc.Mapping.HasLineNumbers || !loc.Mapping.HasFunctions {
			t.Errorf("mapping flags %+v", loc.Mapping)
		}
	})

	t.Run("function entry", func(t *testing.T) {
		f := tg.field(t, "func")
		loc := p.Locate(Addr{PC: hexArg(t, f[2])})
		def := lineOf(t, src, "void *outer_function(int *line) {")
		if loc.Name() != "outer_function" || loc.Lines[0].Line != def {
			t.Fatalf("Locate(outer_function) = %s, want outer_function at line %d", describe(loc), def)
		}
	})

	t.Run("libc dynsym", func(t *testing.T) {
		f := tg.field(t, "libc")
		loc := p.Locate(Addr{PC: hexArg(t, f[2])})
		if n := loc.Name(); n != "write" {
			t.Fatalf("Locate(&write) = %s, want write (not its alias __write)", describe(loc))
		}
		if loc.Mapping == nil || !strings.Contains(filepath.Base(loc.Mapping.File), "libc.so") {
			t.Errorf("write's mapping: %s", describe(loc))
		}
		inside := p.Locate(Addr{PC: hexArg(t, f[2]) + 8})
		if inside.Name() != "write" {
			t.Errorf("an address 8 bytes into write: %s", describe(inside))
		}
	})

	t.Run("build id and stats", func(t *testing.T) {
		want := readelfBuildID(t, bin)
		var m *model.Mapping
		for _, mm := range p.Mappings() {
			if mm.File == bin {
				m = mm
			}
		}
		if m == nil || m.BuildID != want {
			t.Fatalf("mapping of %s: %+v, want build id %s", bin, m, want)
		}
		st := p.Stats()
		var seen bool
		for _, ms := range st.Mappings {
			if ms.File == bin {
				seen = true
				if ms.Symbols != "symtab" || ms.Lines != "dwarf" || ms.Addresses == 0 || ms.Unnamed != 0 {
					t.Errorf("stats of %s: %+v", bin, ms)
				}
			}
			if strings.Contains(ms.File, "libc.so") && ms.Symbols == "" {
				t.Errorf("stats of libc say no symbol source: %+v", ms)
			}
		}
		if !seen {
			t.Errorf("no stats for %s in %+v", bin, st.Mappings)
		}
	})
}

var buildIDRe = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

// readelfBuildID asks binutils for a file's build id.
func readelfBuildID(t testing.TB, file string) string {
	t.Helper()
	readelf := testutil.RequireTool(t, "readelf")
	out, err := exec.Command(readelf, "-n", file).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf -n %s: %v\n%s", file, err, out)
	}
	m := buildIDRe.FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s has no build id:\n%s", file, out)
	}
	return string(m[1])
}

// TestUnknownAddress: an address in no mapping, and one in anonymous
// executable memory without a JIT to name it, become explicit frames.
func TestUnknownAddress(t *testing.T) {
	bin := cProg(t, "gcc", "prog.c")
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, testOptions{})
	loc := p.Locate(Addr{PC: 0x10, Return: true})
	if loc.Name() != "[unknown] 0x10" || loc.Mapping != nil || loc.Kind != model.KindUnknown || loc.Addr != 0x10 {
		t.Errorf("Locate(0x10) = %s", describe(loc))
	}
	anon := hexArg(t, tg.field(t, "anon")[1])
	loc = p.Locate(Addr{PC: anon + 0x10})
	if want := fmt.Sprintf("[anon] %#x", anon+0x10); loc.Name() != want || loc.Mapping == nil || loc.Mapping.File != "[anon]" {
		t.Errorf("Locate(anonymous memory) = %s, want %s", describe(loc), want)
	}
	if st := p.Stats(); st.Unknown != 1 || st.Unnamed != 1 {
		t.Errorf("Stats(): unknown %d, unnamed %d; want 1 and 1", st.Unknown, st.Unnamed)
	}
}

// TestPLTNames: a PLT stub is named "function@plt", from the dynamic
// relocation of the GOT slot it jumps through, as binutils' objdump names
// it (Debian's python3 calls into libc and libm through its PLT).
func TestPLTNames(t *testing.T) {
	python := testutil.RequireTool(t, "/usr/bin/python3") // Debian's, not a pyenv shim
	objdump := testutil.RequireTool(t, "objdump")
	exe, err := filepath.EvalSymlinks(python)
	must(t, err)
	out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", exe).Output()
	must(t, err)
	stubs := map[uint64]string{}
	for _, m := range regexp.MustCompile(`(?m)^([0-9a-f]+) <([^>]+@plt)>:$`).FindAllStringSubmatch(string(out), -1) {
		stubs[hexArg(t, m[1])] = m[2]
	}
	if len(stubs) < 10 {
		t.Fatalf("objdump found %d PLT stubs in %s", len(stubs), exe)
	}
	tg := startTarget(t, python, "-c", "print('ready', flush=True); import time; time.sleep(600)")
	p := newTestProcess(t, tg.Pid, testOptions{})
	var bias uint64
	for _, m := range p.space.Modules() {
		if m.Path == exe && m.File != nil {
			bias = m.Bias
			break
		}
	}
	checked := 0
	for addr, want := range stubs {
		if checked == 50 {
			break
		}
		checked++
		// Inside the stub: after its endbr64 or at its jump.
		loc := p.Locate(Addr{PC: bias + addr + 4})
		if got := loc.Name(); got != want {
			t.Errorf("%#x in %s: %q, objdump says %q", addr, exe, got, want)
		}
	}
}
