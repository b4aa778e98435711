package cpython

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// headerBuilds are the CPythons whose headers are on this machine kind:
// Debian's (python3.11-dev) and pyenv's, which install their internal
// headers too.
var headerBuilds = []string{
	"/usr/bin/python3",
	"/root/.pyenv/versions/3.8.18/bin/python3",
	"/root/.pyenv/versions/3.9.18/bin/python3",
	"/root/.pyenv/versions/3.10.13/bin/python3",
	"/root/.pyenv/versions/3.11.7/bin/python3",
	"/root/.pyenv/versions/3.12.1/bin/python3",
	"/root/.pyenv/versions/3.13.0/bin/python3",
}

// TestLayoutsMatchHeaders compiles testdata/offsets.c against each
// installed version's own headers and checks that every offset it prints
// is the one in that version's table, and that every field the headers
// lack is -1 there.
func TestLayoutsMatchHeaders(t *testing.T) {
	testutil.EndToEnd(t)
	gcc := testutil.RequireTool(t, "gcc")
	for _, py := range headerBuilds {
		t.Run(py, func(t *testing.T) {
			python := testutil.RequireTool(t, py)
			out, err := exec.Command(python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])").Output()
			if err != nil {
				t.Fatal(err)
			}
			inc := strings.TrimSpace(string(out))
			bin := filepath.Join(t.TempDir(), "offsets")
			cmd := exec.Command(gcc, "-I", inc, "-I", filepath.Join(inc, "internal"), "-o", bin, testutil.Testdata(t, "../runtimes/cpython/testdata/offsets.c"))
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gcc against %s (python3-dev installs Debian's headers): %v\n%s", inc, err, b)
			}
			printed, err := exec.Command(bin).Output()
			if err != nil {
				t.Fatal(err)
			}
			checkLayout(t, parseOffsets(t, printed))
		})
	}
}

func parseOffsets(t *testing.T, b []byte) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseInt(val, 10, 64)
		if !ok || err != nil {
			t.Fatalf("offsets printed %q", sc.Text())
		}
		out[name] = n
	}
	return out
}

func checkLayout(t *testing.T, printed map[string]int64) {
	hex := printed["version"]
	minor := int(hex & 0xff)
	l, ok := layouts[minor]
	if hex>>8 != 3 || !ok {
		t.Fatalf("headers of version %#x: no table", hex)
	}
	fields := map[string]int64{
		"runtime.interpreters_head": l.RuntimeInterpretersHead, "runtime.tstate_current": l.RuntimeTstateCurrent,
		"runtime.gil": l.RuntimeGIL, "interp.next": l.InterpNext, "interp.threads_head": l.InterpThreadsHead,
		"interp.id": l.InterpID, "interp.gil": l.InterpGIL, "thread.next": l.ThreadNext,
		"thread.interp": l.ThreadInterp, "thread.frame": l.ThreadFrame, "cframe.current_frame": l.CFrameCurrentFrame,
		"thread.thread_id": l.ThreadID, "thread.native_thread_id": l.ThreadNativeID,
		"gil.last_holder": l.GILLastHolder, "gil.locked": l.GILLocked, "gil.switch_number": l.GILSwitchNumber,
		"gil.cond": l.GILCond, "gil.mutex": l.GILMutex, "gil.cond_size": l.GILCondSize, "gil.mutex_size": l.GILMutexSize,
		"frame.back": l.FrameBack, "frame.code": l.FrameCode, "frame.lasti": l.FrameLasti, "frame.instr": l.FrameInstr,
		"frame.is_entry": l.FrameIsEntry, "frame.owner": l.FrameOwner, "frame.owned_by_cstack": l.OwnedByCStack,
		"code.name": l.CodeName, "code.qualname": l.CodeQualname, "code.filename": l.CodeFilename,
		"code.firstlineno": l.CodeFirstLine, "code.linetable": l.CodeLineTable,
		"code.firsttraceable": l.CodeFirstTraceable, "code.code_adaptive": l.CodeAdaptive, "code.size": l.CodeSize,
		"object.type": offObType, "varobject.size": offObSize, "bytes.data": offBytesVal,
		"unicode.length": l.UnicodeLength, "unicode.state": l.UnicodeState, "unicode.ascii_size": l.UnicodeASCIISize,
		"unicode.compact_size": l.UnicodeCompactSize, "unicode.data": l.UnicodeData, "unicode.kind_shift": l.KindShift,
		"unicode.compact_bit": l.CompactBit, "unicode.ascii_bit": l.ASCIIBit, "unicode.ready_bit": l.ReadyBit,
	}
	// Printed for what they bound, not held in the table as such.
	informational := map[string]bool{"version": true, "runtime.size": true, "thread.size": true, "frame.localsplus": true, "runtime.debug_offsets": true, "runtime.interpreters_main": true}
	for name, v := range printed {
		if informational[name] {
			continue
		}
		want, ok := fields[name]
		if !ok {
			t.Errorf("3.%d: offsets.c prints %s, which no table field holds", minor, name)
			continue
		}
		if want != v {
			t.Errorf("3.%d: %s is %d in the headers, %d in the table", minor, name, v, want)
		}
	}
	for name, v := range fields {
		if _, ok := printed[name]; !ok && v != -1 {
			t.Errorf("3.%d: the headers have no %s, the table says %d (want -1)", minor, name, v)
		}
	}
	if got := printed["frame.localsplus"]; got < l.FrameSize {
		t.Errorf("3.%d: a frame is read as %d bytes, past its fixed part (%d)", minor, l.FrameSize, got)
	}
	// The scan for _PyRuntime (runtime.go) relies on main following head.
	if printed["runtime.interpreters_main"] != l.RuntimeInterpretersHead+8 {
		t.Errorf("3.%d: interpreters.main at %d, not after head (%d)", minor, printed["runtime.interpreters_main"], l.RuntimeInterpretersHead)
	}
	if printed["runtime.debug_offsets"] != 0 && minor >= 13 {
		t.Errorf("3.%d: _Py_DebugOffsets at %d of _PyRuntime, want 0", minor, printed["runtime.debug_offsets"])
	}
}
