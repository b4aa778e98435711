package kallsyms

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

const fixture = `ffffffff81000000 T srso_alias_untrain_ret
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81001000 t __pfx_do_nanosleep
ffffffff81001010 t do_nanosleep
ffffffff81001200 T schedule
ffffffff81002000 D some_data
ffffffff81003000 T _etext
ffffffff83780000 T _sinittext
ffffffff83780100 T early_init
ffffffff837f6810 T _einittext
ffffffffc0201000 t ftrace_trampoline	[__builtin__ftrace]
ffffffffc0a00000 t ext4_readdir	[ext4]
ffffffffc0a00400 t ext4_file_read_iter	[ext4]
ffffffffc0b00000 t nf_hook_slow	[nf_tables]
`

const modulesFixture = `ext4 1048576 2 jbd2,mbcache, Live 0xffffffffc0a00000
nf_tables 8192 0 - Live 0xffffffffc0b00000 (E)
broken line
`

func TestFindBounds(t *testing.T) {
	tab, err := ParseWithModules(strings.NewReader(fixture), strings.NewReader(modulesFixture))
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Modules()) != 2 {
		t.Fatalf("modules = %+v, want ext4 and nf_tables", tab.Modules())
	}
	for _, tc := range []struct {
		addr       uint64
		want, mod  string
		wantAbsent bool
	}{
		{addr: 0xffffffff81000000, want: "srso_alias_untrain_ret"}, // not the _text marker
		{addr: 0xffffffff81001008, want: "__pfx_do_nanosleep"},
		{addr: 0xffffffff81001075, want: "do_nanosleep"},
		{addr: 0xffffffff81001300, want: "schedule"},
		{addr: 0xffffffff81002800, want: "schedule"}, // data symbols are not text: schedule is the last text
		{addr: 0xffffffff81004000, wantAbsent: true}, // past _etext
		{addr: 0xffffffff83780180, want: "early_init"},
		{addr: 0xffffffff90000000, wantAbsent: true}, // between image and modules
		{addr: 0xffffffffc0a00410, want: "ext4_file_read_iter", mod: "ext4"},
		{addr: 0xffffffffc0a80000, want: "ext4_file_read_iter", mod: "ext4"}, // inside ext4's 1 MiB
		{addr: 0xffffffffc0b00010, want: "nf_hook_slow", mod: "nf_tables"},
		{addr: 0xffffffffc0b02001, wantAbsent: true}, // past nf_tables' 8 KiB
		{addr: 0xffffffffc0201010, want: "ftrace_trampoline", mod: "__builtin__ftrace"},
		{addr: 0xffffffffc0201000 + maxModuleSpan, wantAbsent: true},
		{addr: 0x1000, wantAbsent: true},
	} {
		s, ok := tab.Find(tc.addr)
		if tc.wantAbsent {
			if ok {
				t.Errorf("Find(%#x) = %+v, want nothing", tc.addr, s)
			}
			continue
		}
		if !ok || s.Name != tc.want || s.Module != tc.mod {
			t.Errorf("Find(%#x) = %+v, %v; want %s [%s]", tc.addr, s, ok, tc.want, tc.mod)
		}
	}
	if m, ok := tab.Module(0xffffffffc0a00010); !ok || m.Name != "ext4" || m.Size != 1048576 {
		t.Errorf("Module(ext4 address) = %+v, %v", m, ok)
	}
	if _, ok := tab.Module(0xffffffff81001010); ok {
		t.Error("Module(image address) found a module")
	}
	if s, e := tab.Text(); s != 0xffffffff81000000 || e != 0xffffffff81003000 {
		t.Errorf("Text() = %#x, %#x", s, e)
	}
}

func TestHidden(t *testing.T) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(fixture), "\n") {
		f := strings.SplitN(line, " ", 2)
		b.WriteString("0000000000000000 " + f[1] + "\n")
	}
	tab, err := Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !tab.Hidden() || tab.Len() != 0 {
		t.Fatalf("Hidden() = %v, Len() = %d for an all-zero table", tab.Hidden(), tab.Len())
	}
	if s, ok := tab.Find(0); ok {
		t.Errorf("hidden table resolved 0 to %+v", s)
	}
	mods, err := ParseModules(strings.NewReader("ext4 1048576 2 - Live 0x0000000000000000\n"))
	if err != nil || len(mods) != 1 {
		t.Fatalf("ParseModules = %v, %v", mods, err)
	}
	if mods[0].Contains(0) || mods[0].Contains(100) {
		t.Error("a module with a hidden address contains addresses")
	}
}

// TestLive reads this machine's table: the functions a stalled thread
// waits in must resolve, and an address inside one resolves to it.
func TestLive(t *testing.T) {
	if _, err := os.Stat(Path); err != nil {
		testutil.Skip(t, "no %s: %v", Path, err)
	}
	tab, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if tab.Hidden() {
		testutil.Skip(t, "kernel addresses are hidden here (kernel.kptr_restrict; run as root or with CAP_SYSLOG)")
	}
	if tab.Len() < 1000 {
		t.Fatalf("only %d text symbols", tab.Len())
	}
	for _, name := range []string{"do_nanosleep", "schedule", "hrtimer_nanosleep", "futex_wait"} {
		addr, ok := tab.Addr(name)
		if !ok {
			t.Errorf("%s not in the table", name)
			continue
		}
		s, ok := tab.Find(addr + 4)
		if !ok || s.Name != name {
			t.Errorf("Find(%s+4) = %+v, %v", name, s, ok)
		}
	}
	if _, end := tab.Text(); end == 0 {
		t.Error("no _stext/_etext in the live table")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(fixture), []byte(modulesFixture))
	f.Add([]byte("0 T x\n"), []byte("m 1 0 - Live 0x0\n"))
	f.Add([]byte("ffffffffffffffff t a [m]\n"), []byte("m 18446744073709551615 0 - Live 0xffffffffffffffff\n"))
	f.Fuzz(func(t *testing.T, ks, mods []byte) {
		var tab *Table
		var err error
		if n := testutil.HeapBytes(func() {
			tab, err = ParseWithModules(bytes.NewReader(ks), bytes.NewReader(mods))
		}); n > 64*uint64(len(ks)+len(mods))+4<<20 {
			t.Fatalf("parsing %d bytes allocated %d", len(ks)+len(mods), n)
		}
		if err != nil {
			return
		}
		for _, s := range tab.syms {
			if got, ok := tab.Find(s.addr); ok && got.Addr != s.addr {
				t.Fatalf("Find(%#x) returned a symbol at %#x", s.addr, got.Addr)
			}
			// The first symbol of a name is at or below any other.
			if a, ok := tab.Addr(tab.name(s)); !ok || a > s.addr {
				t.Fatalf("Addr(%q) = %#x, %v; a symbol of that name is at %#x", tab.name(s), a, ok, s.addr)
			}
		}
		for _, m := range tab.Modules() {
			tab.Module(m.Addr)
			tab.Find(m.Addr + m.Size)
		}
	})
}

// BenchmarkParse reads this machine's table (symbolization's first kernel
// address pays for it once per stallwatch process), and reports what the
// table holds of the heap for as long as the process lives, its name
// index built (MiB-held, bytes/symbol).
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile(Path)
	if err != nil {
		testutil.Skip(b, "%v", err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(strings.NewReader(string(data))); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	held := float64(heldBy(func() any {
		t, _ := Parse(bytes.NewReader(data))
		t.Addr("schedule")
		return t
	}))
	tab, _ := Parse(bytes.NewReader(data))
	b.ReportMetric(held/(1<<20), "MiB-held")
	b.ReportMetric(held/float64(tab.Len()), "bytes/symbol")
	b.ReportMetric(float64(tab.Len()), "symbols")
}

// heldBy is how much more live heap there is while what make returns is
// kept than before.
func heldBy(make func() any) uint64 {
	live := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := live()
	kept := make()
	after := live()
	runtime.KeepAlive(kept)
	return after - before
}

// TestAddressesHidden: the first line says what the whole table says
// (Hidden), for the kernel's two ways of printing it, and a table that
// cannot be read hides everything.
func TestAddressesHidden(t *testing.T) {
	var zeroed strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(fixture), "\n") {
		f := strings.SplitN(line, " ", 2)
		zeroed.WriteString("0000000000000000 " + f[1] + "\n")
	}
	dir := t.TempDir()
	defer func(p string) { Path = p }(Path)
	for name, text := range map[string]string{"shown": fixture, "zeroed": zeroed.String()} {
		Path = filepath.Join(dir, name)
		if err := os.WriteFile(Path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		tab, err := Parse(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		if got := AddressesHidden(); got != tab.Hidden() {
			t.Errorf("%s: AddressesHidden() = %v, the table's Hidden() = %v", name, got, tab.Hidden())
		}
	}
	Path = filepath.Join(dir, "absent")
	if !AddressesHidden() {
		t.Error("an unreadable table shows addresses")
	}
}
