package unwind

import (
	"debug/elf"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestGoFramePointers: Go code has frame pointers and no .eh_frame; a Go
// thread blocked in read(2) unwinds by the frame-pointer chain to the
// goroutine's function, both from registers and without a stop (where the
// first frame pointer is found by the scan).
func TestGoFramePointers(t *testing.T) {
	testutil.RequirePtrace(t)
	bin := testutil.BuildGo(t, "goblocked")
	tg := testutil.Start(t, bin)
	tid, _ := strconv.Atoi(strings.TrimPrefix(tg.WaitLine(t, "ready ", 10*time.Second), "ready "))
	if err := testutil.Eventually(10*time.Second, func() bool {
		sc, err := procfs.ReadSyscall(tg.Pid, tid)
		return err == nil && sc.Nr == 0
	}); err != nil {
		t.Fatal("reader never blocked in read")
	}
	p, err := NewProcess(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	syms := goSymbols(t, bin)
	want := []string{"main.blockInRead", "main.reader", "runtime.goexit.abi0"}

	blocked, err := p.BlockedTrace(tid, MaxFrames)
	if err != nil {
		t.Fatal(err)
	}
	st := ptraceStop(t, tg.Pid, tid)
	regs := p.UnwindTrace(st.regs, Fallback(DumpMemory(st.regs.SP, st.dump), ProcessMemory(tg.Pid)), MaxFrames)
	for name, tr := range map[string]Trace{"no stop": blocked, "registers": regs} {
		names := syms.names(tr.PCs)
		if !inOrder(names, want) {
			t.Errorf("%s (%s, end %q): %v, want %v in order", name, tr.Methods(), tr.End, names, want)
		}
	}
	if m := regs.Methods(); m != "fp" {
		t.Errorf("from registers the Go stack was unwound by %s, want fp", m)
	}
}

type symTable []elf.Symbol

func goSymbols(t *testing.T, path string) symTable {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var out symTable
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// names resolves pcs in a non-PIE Go binary (link-time addresses).
func (st symTable) names(pcs []uint64) []string {
	var out []string
	for i, pc := range pcs {
		if i > 0 {
			pc--
		}
		j := sort.Search(len(st), func(j int) bool { return st[j].Value > pc }) - 1
		if j >= 0 && pc < st[j].Value+st[j].Size {
			out = append(out, st[j].Name)
		} else {
			out = append(out, "?")
		}
	}
	return out
}

func inOrder(names, want []string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && n == want[i] {
			i++
		}
	}
	return i == len(want)
}
