package textfmt

import (
	"math"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

func TestStackSummary(t *testing.T) {
	k := func(name string) Frame { return Frame{Name: name, Kind: model.KindKernel, Module: model.KernelMapping} }
	libc := func(name string) Frame { return Frame{Name: name, Module: "libc.so.6"} }
	app := func(name string) Frame { return Frame{Name: name, Module: "app"} }
	tests := []struct {
		name string
		fr   []Frame
		max  int
		want string
	}{
		{"empty", nil, 6, "[no stack]"},
		{"all app", []Frame{app("a"), app("b")}, 6, "a ← b"},
		{"kernel and libc skipped to the program", []Frame{k("futex_wait"), k("do_futex"), libc("__lll_lock_wait"), app("lock_a"), app("main")}, 6, "futex_wait ← … ← lock_a ← main"},
		{"no skip when the program follows at once", []Frame{k("irq"), app("spin"), app("main")}, 6, "irq ← spin ← main"},
		{"Go runtime wrappers skipped", []Frame{{Name: "internal/runtime/syscall/linux.Syscall6"}, {Name: "syscall.Syscall6"}, {Name: "main.(*mutex).Lock"}}, 6, "internal/runtime/syscall/linux.Syscall6 ← … ← main.(*mutex).Lock"},
		{"cut at max", []Frame{k("k"), app("a"), app("b"), app("c"), app("d")}, 3, "k ← a ← b ← … (2 more)"},
		{"only system code", []Frame{k("schedule"), k("do_nanosleep"), libc("clock_nanosleep")}, 6, "schedule ← do_nanosleep ← clock_nanosleep"},
		{"a stack cut short is not the program's", []Frame{k("futex_wait"), {Name: "runtime.futex"}, {Name: "runtime.mstart"}, {Name: "[truncated: no unwind info in app]"}}, 6,
			"futex_wait ← runtime.futex ← runtime.mstart ← [truncated: no unwind info in app]"},
	}
	for _, tt := range tests {
		if got := StackSummary(tt.fr, tt.max); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestDur(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {500, "500ns"}, {1500, "1.5µs"}, {400 * time.Microsecond, "400µs"},
		{12345 * time.Microsecond, "12.3ms"}, {10200 * time.Millisecond, "10.2s"},
		{125 * time.Second, "2m05s"}, {3*time.Hour + 4*time.Minute, "3h04m"}, {-2 * time.Second, "-2s"},
		{math.MaxInt64, "2562047h47m"}, {math.MinInt64, "-2562047h47m"},
	}
	for _, tt := range tests {
		if got := Dur(tt.d); got != tt.want {
			t.Errorf("Dur(%d) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestShare(t *testing.T) {
	for _, tt := range []struct {
		f    float64
		want string
	}{{0, "0.0%"}, {0.075, "7.5%"}, {0.62, "62%"}, {0.996, "99%"}, {1, "100%"}, {1.5, "150%"}} {
		if got := Share(tt.f); got != tt.want {
			t.Errorf("Share(%v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}

func TestLocationFrames(t *testing.T) {
	exe := &model.Mapping{File: "/usr/bin/app"}
	tests := []struct {
		name string
		loc  *model.Location
		want []Frame
	}{
		{"no lines: the address", &model.Location{Addr: 0x401000, Mapping: exe, Kind: model.KindNative},
			[]Frame{{Name: "0x401000", Module: "app", Kind: model.KindNative}}},
		{"inlined: innermost first", &model.Location{Addr: 1, Mapping: exe, Kind: model.KindNative, Lines: []model.Line{
			{Function: "hash", File: "/src/hash.h", Line: 30}, {Function: "spin", File: "/src/app.c", Line: 12}}},
			[]Frame{{Name: "hash", File: "hash.h", Line: 30, Module: "app", Kind: model.KindNative}, {Name: "spin", File: "app.c", Line: 12, Module: "app", Kind: model.KindNative}}},
		{"the system name when there is no other", &model.Location{Addr: 2, Kind: model.KindJIT, Lines: []model.Line{{SystemName: "JS:*f"}}},
			[]Frame{{Name: "JS:*f", Kind: model.KindJIT}}},
		{"names from the target made safe", &model.Location{Addr: 3, Lines: []model.Line{{Function: "evil\x1b[2J"}}},
			[]Frame{{Name: `evil\x1b[2J`}}},
	}
	for _, tt := range tests {
		got := LocationFrames(tt.loc)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: frame %d %+v, want %+v", tt.name, i, got[i], tt.want[i])
			}
		}
	}
}

// TestStacksByName: stacks that differ only in addresses are one stack;
// one that differs in a name is another; ids go in the order first seen.
func TestStacksByName(t *testing.T) {
	fn := func(addr uint64, name string) *model.Location {
		return &model.Location{Addr: addr, Kind: model.KindNative, Lines: []model.Line{{Function: name}}}
	}
	s := NewStacks()
	a := s.Add([]*model.Location{fn(0x10, "loop"), fn(0x20, "main")})
	b := s.Add([]*model.Location{fn(0x14, "loop"), fn(0x20, "main")})
	c := s.Add([]*model.Location{fn(0x30, "other"), fn(0x20, "main")})
	if a != 0 || b != 0 || c != 1 || len(s.Frames) != 2 || s.Frames[1][0].Name != "other" {
		t.Errorf("ids %d %d %d, stacks %+v", a, b, c, s.Frames)
	}
}
