package symbolize

import (
	"github.com/stallwatch/stallwatch/internal/addrspace"
	"os"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/kallsyms"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// TestKernelLive names kernel addresses from this machine's kallsyms, and
// the frames of /proc/<pid>/stack of a target blocked in pause().
func TestKernelLive(t *testing.T) {
	tab, err := kallsyms.Load()
	if err != nil {
		t.Fatal(err)
	}
	if tab.Hidden() {
		testutil.Skip(t, "kernel addresses are hidden here (kptr_restrict); run as root with kernel.kptr_restrict=0")
	}
	bin := cProg(t, "gcc", "prog.c")
	tg := startTarget(t, bin)
	p := newTestProcess(t, tg.Pid, testOptions{Kernel: true})
	for _, name := range []string{"do_nanosleep", "schedule", "futex_wait"} {
		addr, ok := tab.Addr(name)
		if !ok {
			t.Fatalf("%s is not in kallsyms", name)
		}
		loc := p.Locate(Addr{PC: addr + 0x10, Kernel: true, Return: true})
		if loc.Name() != name || loc.Kind != model.KindKernel || loc.Mapping == nil || loc.Mapping.File != KernelMappingFile {
			t.Errorf("Locate(%s+0x10) = %s", name, describe(loc))
		}
	}
	_, etext := tab.Text()
	if loc := p.Locate(Addr{PC: etext + 0x100000, Kernel: true}); !strings.HasPrefix(loc.Name(), "[kernel] 0x") {
		t.Errorf("an address past the kernel's text: %s, want an explicit [kernel] 0x... frame", describe(loc))
	}
	if st := p.Stats(); st.KernelHidden || st.Kernel != 4 {
		t.Errorf("Stats: hidden=%v kernel=%d, want false and 4", st.KernelHidden, st.Kernel)
	}

	testutil.RequireRoot(t) // /proc/<pid>/stack
	var frames []procfs.KernelFrame
	if err := testutil.Eventually(10e9, func() bool {
		frames, err = procfs.ReadKernelStack(tg.Pid, tg.Pid)
		return err == nil && len(frames) > 0
	}); err != nil {
		t.Fatalf("no kernel stack for the paused target: %v", err)
	}
	for _, f := range frames {
		loc := p.LocateKernelFrame(f)
		want, _ := tab.Addr(f.Symbol)
		if loc.Name() != f.Symbol || loc.Kind != model.KindKernel || loc.Addr != want+f.Offset {
			t.Errorf("LocateKernelFrame(%+v) = %s, want the address %#x", f, describe(loc), want+f.Offset)
		}
		if again := p.LocateKernelFrame(f); again != loc {
			t.Error("LocateKernelFrame is not cached")
		}
	}
}

// TestKernelHidden: with kptr_restrict the kernel prints zeros; kernel
// frames become [kernel], never a name picked from zeros, and Stats say
// why and how to fix it.
func TestKernelHidden(t *testing.T) {
	var b strings.Builder
	for _, name := range []string{"_stext", "do_nanosleep", "schedule", "_etext"} {
		b.WriteString("0000000000000000 T " + name + "\n")
	}
	tab, err := kallsyms.Parse(strings.NewReader(b.String()))
	must(t, err)
	p := ownProcessWith(t, newKernelSyms(tab))
	for _, pc := range []uint64{0xffffffff81234567, 0, 0xffffffffc0001000} {
		loc := p.Locate(Addr{PC: pc, Kernel: true})
		if loc.Name() != "[kernel]" || loc.Kind != model.KindKernel || loc.Mapping == nil || loc.Mapping.File != KernelMappingFile {
			t.Errorf("Locate(%#x) with hidden kallsyms = %s", pc, describe(loc))
		}
	}
	st := p.Stats()
	// What the note says for which process is package perms' (its
	// TestExplain); here: that it is said, for this process.
	if !st.KernelHidden || st.KernelNote != perms.Note(perms.KernelNames) || !strings.Contains(st.KernelNote, "[kernel]") {
		t.Errorf("Stats: hidden=%v note=%q", st.KernelHidden, st.KernelNote)
	}
	// Frames from /proc/<pid>/stack carry their names anyway.
	loc := p.LocateKernelFrame(procfs.KernelFrame{Symbol: "do_nanosleep", Offset: 0x75, Size: 0x160})
	if loc.Name() != "do_nanosleep" || loc.Addr != 0 {
		t.Errorf("LocateKernelFrame with hidden kallsyms = %s", describe(loc))
	}
}

// TestKernelModules: a module's code is named with the module as its
// mapping, bounded by /proc/modules (this machine's kernel has no
// modules: a fixture in the kernel's formats).
func TestKernelModules(t *testing.T) {
	tab, err := kallsyms.ParseWithModules(strings.NewReader(`ffffffff81000000 T _stext
ffffffff81001000 T schedule
ffffffff81100000 T _etext
ffffffffc0a00000 t ext4_readdir	[ext4]
ffffffffc0a00400 t ext4_file_read_iter	[ext4]
ffffffffc0b00000 t nft_do_chain	[nf_tables]
`), strings.NewReader("ext4 1048576 2 jbd2, Live 0xffffffffc0a00000\nnf_tables 4096 0 - Live 0xffffffffc0b00000\n"))
	must(t, err)
	p := ownProcessWith(t, newKernelSyms(tab))
	for _, tc := range []struct {
		pc         uint64
		name, file string
	}{
		{0xffffffffc0a00420, "ext4_file_read_iter", "[ext4]"},
		{0xffffffffc0b00010, "nft_do_chain", "[nf_tables]"},
		{0xffffffffc0b01010, "[kernel] 0xffffffffc0b01010", KernelMappingFile}, // past nf_tables
		{0xffffffff81001234, "schedule", KernelMappingFile},
	} {
		loc := p.Locate(Addr{PC: tc.pc, Kernel: true})
		if loc.Name() != tc.name || loc.Mapping == nil || loc.Mapping.File != tc.file {
			t.Errorf("Locate(%#x) = %s, want %s in %s", tc.pc, describe(loc), tc.name, tc.file)
		}
	}
	var files []string
	for _, m := range p.Mappings() {
		if m.Kind == model.KindKernel {
			files = append(files, m.File)
			if m.File == "[ext4]" && (m.Start != 0xffffffffc0a00000 || m.Limit != 0xffffffffc0b00000) {
				t.Errorf("[ext4] mapping %#x-%#x", m.Start, m.Limit)
			}
		}
	}
	if strings.Join(files, " ") != "[kernel.kallsyms] [ext4] [nf_tables]" && strings.Join(files, " ") != "[kernel.kallsyms] [nf_tables] [ext4]" {
		t.Errorf("kernel mappings in use: %q", files)
	}
	if loc := p.LocateKernelFrame(procfs.KernelFrame{Symbol: "ext4_readdir", Offset: 0x10, Module: "[ext4]"}); loc.Mapping.File != "[ext4]" || loc.Addr != 0xffffffffc0a00010 {
		t.Errorf("LocateKernelFrame in a module = %s", describe(loc))
	}
}

// TestKernelOff: without Options.Kernel, kernel addresses are [kernel].
func TestKernelOff(t *testing.T) {
	p := newTestProcess(t, os.Getpid(), testOptions{})
	if loc := p.Locate(Addr{PC: 0xffffffff81000000, Kernel: true}); loc.Name() != "[kernel]" || loc.Kind != model.KindKernel {
		t.Errorf("Locate(kernel) without Kernel = %s", describe(loc))
	}
}

// ownProcessWith is a Process of this test's own process naming kernel
// addresses from ks.
func ownProcessWith(t *testing.T, ks *kernelSyms) *Process {
	space, err := addrspace.Open(os.Getpid(), addrspace.Options{})
	must(t, err)
	t.Cleanup(func() { space.Close() })
	return newProcess(space, Options{Kernel: true}, ks)
}
