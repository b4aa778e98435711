package objfile

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestGoRuntime: in this test binary (Go, built by the toolchain that runs
// the tests), the runtime's g0 switches are found, g0.sched.pc is the
// return address of mstart0's call of mstart1, and the thread's root
// frame is mstart's call of mstart0: what the Go runtime says it sets up.
func TestGoRuntime(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(fd, exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rt, err := f.GoRuntime()
	if err != nil || rt == nil {
		t.Fatalf("GoRuntime: %v, %v", rt, err)
	}
	g, _ := f.Go()
	nameAt := func(pc uint64) string {
		fn, _, _, _ := g.Line(pc)
		return strings.TrimSuffix(fn, ".abi0")
	}
	var switches []string
	for _, sw := range rt.G0Switch {
		switches = append(switches, nameAt(sw.Lo))
	}
	if strings.Join(switches, " ") != "runtime.mcall runtime.morestack" {
		t.Errorf("g0 switches %v, want runtime.mcall and runtime.morestack", switches)
	}
	if fn := nameAt(rt.SchedPC - 1); fn != "runtime.mstart0" {
		t.Errorf("g0.sched.pc %#x is in %s, want runtime.mstart0", rt.SchedPC, fn)
	}
	if fn := nameAt(rt.StartPC - 1); fn != "runtime.mstart" {
		t.Errorf("the root frame's return address %#x is in %s, want runtime.mstart", rt.StartPC, fn)
	}
	mstart1, _ := g.FuncRange("runtime.mstart1")
	f.mu.Lock()
	call, err := f.readVirtual(rt.SchedPC-5, 5)
	f.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if call[0] != 0xe8 || rt.SchedPC+uint64(int64(int32(binary.LittleEndian.Uint32(call[1:])))) != mstart1 {
		t.Errorf("the instruction before g0.sched.pc is % x, not a call of runtime.mstart1 at %#x", call, mstart1)
	}
	if rt.Cgo != hasFunc(g, "crosscall2") {
		t.Errorf("Cgo %v", rt.Cgo)
	}
}

// TestSymbolValue: a data symbol's link-time address is found by name
// (glibc exports its stdin, an object, in .dynsym), and a name no table
// has is not.
func TestSymbolValue(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	fd, err := os.Open(libc)
	if err != nil {
		testutil.Skip(t, "no glibc at %s: %v", libc, err)
	}
	f, err := Open(fd, libc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, ok, err := f.SymbolValue("stdin")
	if err != nil || !ok || v == 0 {
		t.Errorf("stdin: %#x, %v, %v", v, ok, err)
	}
	if _, ok, err := f.SymbolValue("__jit_debug_descriptor"); ok || err != nil {
		t.Errorf("a symbol no table has: found %v, %v", ok, err)
	}
}
