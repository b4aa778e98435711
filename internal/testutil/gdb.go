package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// GDBFrame is one frame of a thread as gdb sees it: the oracle of the
// unwinding and naming tests.
type GDBFrame struct {
	PC   uint64
	Name string // as gdb prints it ("app::Waiter<int>::wait"), "??" when unknown
	// Inline marks a frame gdb made from debug information (an inlined
	// call, a tail call): no return address on the stack makes it.
	Inline bool
	// File is the source file gdb's debug information puts the frame in.
	File string
}

const gdbScript = `
import gdb
for inf in gdb.inferiors():
    for th in inf.threads():
        th.switch()
        f = gdb.newest_frame()
        out = []
        while f is not None and len(out) < 2048:
            inline = f.type() in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME)
            sal = f.find_sal()
            fname = sal.symtab.filename if sal is not None and sal.symtab is not None else ""
            out.append("%#x\t%s\t%d\t%s" % (f.pc(), f.name() or "??", 1 if inline else 0, fname))
            try:
                f = f.older()
            except gdb.error:
                break
        print("THREAD %d" % th.ptid[1])
        for o in out:
            print("FRAME " + o)
`

// GDBStacks asks gdb for every thread's frames, innermost first, inline
// frames included (see GDBFrame.Inline).
func GDBStacks(t testing.TB, pid int) map[int][]GDBFrame {
	t.Helper()
	gdb := RequireTool(t, "gdb")
	script := filepath.Join(t.TempDir(), "bt.py")
	if err := os.WriteFile(script, []byte(gdbScript), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gdb, "-batch", "-nx", "-p", strconv.Itoa(pid), "-ex", "source "+script).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	stacks := map[int][]GDBFrame{}
	tid := 0
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "THREAD "):
			tid, _ = strconv.Atoi(strings.TrimPrefix(line, "THREAD "))
		case strings.HasPrefix(line, "FRAME ") && tid != 0:
			f := strings.SplitN(strings.TrimPrefix(line, "FRAME "), "\t", 4)
			if len(f) < 4 {
				continue
			}
			pc, _ := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
			stacks[tid] = append(stacks[tid], GDBFrame{PC: pc, Name: f[1], Inline: f[2] == "1", File: f[3]})
		}
	}
	if len(stacks) == 0 {
		t.Fatalf("gdb printed no threads:\n%s", out)
	}
	return stacks
}

// Real drops the inline frames: what a walk of the stack finds.
func Real(frames []GDBFrame) []GDBFrame {
	var out []GDBFrame
	for _, f := range frames {
		if !f.Inline {
			out = append(out, f)
		}
	}
	return out
}
