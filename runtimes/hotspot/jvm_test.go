package hotspot

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// The tests run real JVMs: testdata/jvm/Stall.java.
func TestMain(m *testing.M) { testutil.Main(m, testutil.RemoveJavaClasses) }

// startStall runs `java [flags] Stall mode args...` and waits for it.
func startStall(t testing.TB, flags []string, mode string, args ...string) *testutil.Target {
	t.Helper()
	return testutil.StartJava(t, flags, append([]string{mode}, args...)...)
}

// jstack runs `jstack -l pid` within timeout; ok is false when it did not
// finish (a VM that does not answer).
func jstack(t testing.TB, pid int, timeout time.Duration) (out []byte, ok bool) {
	t.Helper()
	bin := testutil.RequireTool(t, "jstack")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-l", strconv.Itoa(pid))
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return out, false
	}
	if err != nil {
		t.Fatalf("jstack -l %d: %v\n%s", pid, err, out)
	}
	return out, true
}

// readMemory reads the JVM's Java threads from its memory.
func readMemory(t testing.TB, pid int, regs map[int]Registers) *Java {
	t.Helper()
	mem, syms := openLive(t, pid)
	l, err := ReadLayout(NewReader(mem, Limits{}), syms)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := NewVM(NewReader(mem, Limits{}), syms, l)
	if err != nil {
		t.Fatal(err)
	}
	j, err := vm.ReadJava(regs)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// frameText is a frame as jstack prints it, without the module (memory
// does not know it) and with its lock lines.
func frameText(f Frame) string {
	var b strings.Builder
	fmt.Fprintf(&b, "at %s(", f.Method)
	switch {
	case f.Kind == Native:
		b.WriteString("Native Method")
	case f.Method.File == "":
		b.WriteString("Unknown Source")
	case f.Line > 0:
		fmt.Fprintf(&b, "%s:%d", f.Method.File, f.Line)
	default:
		b.WriteString(f.Method.File)
	}
	b.WriteString(")")
	for _, l := range f.Locks {
		fmt.Fprintf(&b, " - %s <%#x> (a %s)", l.Kind, l.Object.Addr, l.Object.Class)
	}
	return b.String()
}

// sameThreads checks that memory read every Java thread jstack printed,
// with its name, id, status and frames.
func sameThreads(t *testing.T, mem, dump *Java) {
	t.Helper()
	for _, want := range dump.Threads {
		if want.JavaID == 0 {
			continue // the VM's own threads: not Java threads
		}
		got := mem.Thread(want.TID)
		if got == nil {
			t.Errorf("jstack's %q (tid %d) not read from memory", want.Name, want.TID)
			continue
		}
		if got.Name != want.Name || got.JavaID != want.JavaID || got.Status != want.Status ||
			got.Daemon != want.Daemon || got.Priority != want.Priority {
			t.Errorf("tid %d: memory says %q #%d %q daemon=%v prio=%d, jstack %q #%d %q daemon=%v prio=%d", want.TID,
				got.Name, got.JavaID, got.Status, got.Daemon, got.Priority,
				want.Name, want.JavaID, want.Status, want.Daemon, want.Priority)
		}
		if g, w := stackText(got.Frames), stackText(want.Frames); g != w {
			t.Errorf("%q: memory's frames\n%s\njstack's\n%s", want.Name, g, w)
		}
	}
}

func stackText(fs []Frame) string {
	var lines []string
	for _, f := range fs {
		lines = append(lines, "\t"+frameText(f))
	}
	return strings.Join(lines, "\n")
}
