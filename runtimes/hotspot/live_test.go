package hotspot

import (
	"bufio"
	"debug/elf"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/addrspace"
)

// liveSymbols are libjvm.so's symbols in a live JVM, read from the file
// its maps name: the tests' stand-in for the capture's own lookup.
type liveSymbols map[string]uint64

func (s liveSymbols) Symbol(name string) (uint64, uint64, bool) { a, ok := s[name]; return a, 0, ok }

func openLive(t testing.TB, pid int) (Memory, liveSymbols) {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var base uint64
	var path string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || !strings.HasSuffix(fs[5], "/libjvm.so") || fs[2] != "00000000" {
			continue
		}
		start, _, _ := strings.Cut(fs[0], "-")
		base, _ = strconv.ParseUint(start, 16, 64)
		path = fs[5]
		break
	}
	if path == "" {
		t.Fatalf("pid %d maps no libjvm.so", pid)
	}
	ef, err := elf.Open("/proc/" + strconv.Itoa(pid) + "/root" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms := liveSymbols{}
	dyn, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	local, _ := ef.Symbols() // .symtab, where the build keeps it
	for _, s := range append(local, dyn...) {
		if s.Value != 0 {
			syms[s.Name] = base + s.Value
		}
	}
	return addrspace.NewMemory(pid), syms
}
