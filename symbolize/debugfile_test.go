package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// strippedVariant copies the -g build of prog.c into dir as name, strips
// it, and returns its path and the separate debug file made from it.
func strippedVariant(t *testing.T, dir, name string) (bin, debug string) {
	t.Helper()
	objcopy := testutil.RequireTool(t, "objcopy")
	strip := testutil.RequireTool(t, "strip")
	src := cProg(t, "gcc", "prog.c")
	bin = filepath.Join(dir, name)
	debug = filepath.Join(dir, name+".debug")
	must(t, run(dir, objcopy, "--only-keep-debug", src, debug))
	must(t, run(dir, strip, "--strip-all", "-o", bin, src))
	return bin, debug
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkNamed asserts that the stripped target's own functions resolve,
// with source lines, and that Stats names the source used.
func checkNamed(t *testing.T, bin string, opts testOptions, wantSource string) *testProcess {
	t.Helper()
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, opts)
	f := tg.field(t, "ret")
	loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true})
	if loc.Name() != "outer_function" || loc.Lines[0].File != f[3] || loc.Lines[0].Line != atoi(t, f[4]) {
		t.Fatalf("Locate = %s, want outer_function at %s:%s", describe(loc), f[3], f[4])
	}
	f = tg.field(t, "inl")
	if loc := p.Locate(Addr{PC: hexArg(t, f[1]), Return: true}); len(loc.Lines) != 2 || loc.Lines[0].Function != "inlined_helper" {
		t.Errorf("inline chain from the debug file: %s", describe(loc))
	}
	for _, ms := range p.Stats().Mappings {
		if ms.File == bin {
			if !strings.HasPrefix(ms.Symbols, wantSource) {
				t.Errorf("Stats says symbols from %q, want %q", ms.Symbols, wantSource)
			}
			return p
		}
	}
	t.Errorf("no stats for %s", bin)
	return p
}

func TestStrippedWithoutDebugFile(t *testing.T) {
	dir := t.TempDir()
	bin, debug := strippedVariant(t, dir, "bare")
	os.Remove(debug)
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, testOptions{DebugDirs: []string{dir}})
	f := tg.field(t, "ret")
	loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true})
	if !strings.HasPrefix(loc.Name(), "bare+0x") || loc.Mapping == nil || loc.Mapping.File != bin {
		t.Fatalf("a stripped function: %s, want an explicit bare+0xOFFSET frame", describe(loc))
	}
	st := p.Stats()
	if st.Unnamed != 1 || len(st.Mappings) != 1 || st.Mappings[0].Unnamed != 1 || len(st.Mappings[0].Missing) == 0 {
		t.Errorf("Stats do not count the unnamed address and say why: %+v", st)
	}
}

func TestDebugLinkBesideBinary(t *testing.T) {
	dir := t.TempDir()
	bin, _ := strippedVariant(t, dir, "linked")
	must(t, run(dir, "objcopy", "--add-gnu-debuglink=linked.debug", bin))
	checkNamed(t, bin, testOptions{DebugDirs: []string{t.TempDir()}}, "debuglink "+filepath.Join(dir, "linked.debug"))
}

func TestDebugLinkInDebugDir(t *testing.T) {
	dir := t.TempDir()
	bin, debug := strippedVariant(t, dir, "linked2")
	must(t, run(dir, "objcopy", "--add-gnu-debuglink=linked2.debug", bin))
	debugDir := t.TempDir()
	moved := filepath.Join(debugDir, dir, "linked2.debug") // <debugdir>/<binary's dir>/<name>
	must(t, os.MkdirAll(filepath.Dir(moved), 0o755))
	must(t, os.Rename(debug, moved))
	checkNamed(t, bin, testOptions{DebugDirs: []string{debugDir}}, "debuglink "+moved)
}

// TestDebugLinkCRCMismatch: a file with the debuglink's name but another
// content (another build) is refused, and the report says why.
func TestDebugLinkCRCMismatch(t *testing.T) {
	dir := t.TempDir()
	bin, debug := strippedVariant(t, dir, "wrongcrc")
	must(t, run(dir, "objcopy", "--add-gnu-debuglink=wrongcrc.debug", bin))
	// The debug file of another build (-O2) under the same name.
	b, err := os.ReadFile(cProg(t, "gcc", "prog.c", "-O2"))
	must(t, err)
	must(t, os.WriteFile(debug, b, 0o644))
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, testOptions{DebugDirs: []string{t.TempDir()}})
	f := tg.field(t, "ret")
	if loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true}); !strings.HasPrefix(loc.Name(), "wrongcrc+0x") {
		t.Fatalf("a debug file with the wrong CRC was used: %s", describe(loc))
	}
	st := p.Stats()
	if len(st.Mappings) == 0 || !strings.Contains(strings.Join(st.Mappings[0].Missing, " "), "CRC") {
		t.Errorf("Stats do not say the CRC did not match: %+v", st.Mappings)
	}
}

func TestBuildIDDebugDir(t *testing.T) {
	dir := t.TempDir()
	bin, debug := strippedVariant(t, dir, "byid")
	id := readelfBuildID(t, bin)
	debugDir := t.TempDir()
	dst := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	must(t, os.Rename(debug, dst))
	checkNamed(t, bin, testOptions{DebugDirs: []string{debugDir}}, "build-id "+dst)
}

// TestMiniDebugInfo builds .gnu_debugdata the way Fedora's find-debuginfo
// does (gdb's manual, "MiniDebugInfo"): the function symbols that .dynsym
// lacks, in a stripped ELF file compressed with xz, added to the stripped
// binary. It names functions but has no lines.
func TestMiniDebugInfo(t *testing.T) {
	for _, tool := range []string{"nm", "objcopy", "strip", "xz"} {
		testutil.RequireTool(t, tool)
	}
	dir := t.TempDir()
	src := cProg(t, "gcc", "prog.c")
	bin := filepath.Join(dir, "mini")
	script := `set -e
nm -D "$SRC" --format=posix --defined-only | awk '{ print $1 }' | sort > dynsyms
nm "$SRC" --format=posix --defined-only | awk '{ if ($2 == "T" || $2 == "t" || $2 == "D") print $1 }' | sort > funcsyms
comm -13 dynsyms funcsyms > keep_symbols
objcopy --only-keep-debug "$SRC" debug
objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols=keep_symbols debug mini_debuginfo
strip --strip-all -R .comment -o "$BIN" "$SRC"
xz mini_debuginfo
objcopy --add-section .gnu_debugdata=mini_debuginfo.xz "$BIN"
`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SRC="+src, "BIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making MiniDebugInfo: %v\n%s", err, out)
	}
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, testOptions{DebugDirs: []string{t.TempDir()}})
	f := tg.field(t, "ret")
	loc := p.Locate(Addr{PC: hexArg(t, f[2]), Return: true})
	if loc.Name() != "outer_function" {
		t.Fatalf("Locate = %s, want outer_function from .gnu_debugdata", describe(loc))
	}
	f = tg.field(t, "inl")
	if loc := p.Locate(Addr{PC: hexArg(t, f[1]), Return: true}); loc.Name() != "holds_inline" {
		t.Errorf("Locate = %s, want holds_inline (no inline frames without DWARF)", describe(loc))
	}
	st := p.Stats()
	if len(st.Mappings) != 1 || st.Mappings[0].Symbols != ".gnu_debugdata" || st.Mappings[0].Lines != "" {
		t.Errorf("Stats: %+v", st.Mappings)
	}
}
