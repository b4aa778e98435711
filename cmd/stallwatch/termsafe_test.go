package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// evilName is what an audit planted in a perf map entry: retitle the
// terminal window, then clear the screen. escapedEvil is how stallwatch
// prints it.
const (
	evilName    = "evil\x1b]0;pwned\x07\x1b[2Jname"
	escapedEvil = `evil\x1b]0;pwned\x07\x1b[2Jname`
)

// evilPython is a CPython program whose perf map (python3.12 -X perf
// writes one, as CPython's perf trampoline does for every function it
// runs) names a function evilName, from a file whose name is hostile too,
// and whose main thread is named with the same escapes.
const evilPython = `
import threading, time
src = "def f():\n    return sum(range(10))\n"
ns = {}
exec(compile(src, "/app/\x1b]0;pwned\x07\x1b[2J.py", "exec"), ns)
evil = "evil\x1b]0;pwned\x07\x1b[2Jname"
f = ns["f"]
f.__code__ = f.__code__.replace(co_name=evil, co_qualname=evil)
for _ in range(100):
    f()
with open("/proc/self/task/%d/comm" % threading.get_native_id(), "w") as comm:
    comm.write("x\x1b[2J\x1b]0;t\x07")
print("ready", flush=True)
while True:
    time.sleep(3600)
`

// python312 finds a CPython that writes perf maps (3.12 or later).
func python312(t *testing.T) string {
	t.Helper()
	for _, pattern := range []string{"/root/.pyenv/versions/3.1[2-9]*/bin/python3", "/usr/bin/python3.1[2-9]"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	testutil.Skip(t, "no CPython >= 3.12 (it writes the perf map this test needs)")
	return ""
}

// noTerminalControl fails when out holds a byte a terminal acts on: ESC,
// BEL, a C1 control, a carriage return.
func noTerminalControl(t *testing.T, what, out string) {
	t.Helper()
	if i := strings.IndexAny(out, "\x1b\x07\r\u009b\u009d"); i >= 0 {
		t.Errorf("%s prints a terminal control at byte %d: %q", what, i, out[max(0, i-40):min(len(out), i+40)])
	}
}

// TestTargetNamesEscaped: names a target controls — a perf map entry a
// real CPython wrote, a thread's name — reach no output unescaped: jit
// inspect (text and JSON), jit symbolize, snapshot, record's summary and
// report.txt, report, and the logs.
func TestTargetNamesEscaped(t *testing.T) {
	py := python312(t)
	script := filepath.Join(t.TempDir(), "evil.py")
	if err := os.WriteFile(script, []byte(evilPython), 0o644); err != nil {
		t.Fatal(err)
	}
	tg := testutil.Start(t, py, "-X", "perf", script)
	tg.WaitLine(t, "ready", 30*time.Second)
	perfMap := fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)
	t.Cleanup(func() { os.Remove(perfMap) })
	data, err := os.ReadFile(perfMap)
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, evilName) {
			addr = "0x" + strings.Fields(line)[0]
		}
	}
	if addr == "" {
		t.Fatalf("CPython's perf map has no entry named %q:\n%s", evilName, data)
	}
	pid := strconv.Itoa(tg.Pid)

	// jit inspect: text.
	code, out, errOut := runCLI("jit", "inspect", perfMap)
	if code != exitOK {
		t.Fatalf("jit inspect: exit %d: %s", code, errOut)
	}
	noTerminalControl(t, "jit inspect", out+errOut)
	// jit inspect --format json: escaped as JSON escapes, so the name is whole.
	code, out, errOut = runCLI("jit", "inspect", "--format", "json", perfMap)
	noTerminalControl(t, "jit inspect --format json", out+errOut)
	var sum struct {
		Largest []struct{ Name string } `json:"largest"`
	}
	if err := json.Unmarshal([]byte(out), &sum); code != exitOK || err != nil {
		t.Fatalf("jit inspect --format json: exit %d, %v", code, err)
	}
	// jit symbolize: the name, escaped, on its one line.
	code, out, errOut = runCLI("jit", "symbolize", "-p", pid, addr)
	if code != exitOK || !strings.Contains(out, escapedEvil) || strings.Count(out, "\n") != 1 {
		t.Errorf("jit symbolize: exit %d, %q (stderr %q); want one line with %q", code, out, errOut, escapedEvil)
	}
	noTerminalControl(t, "jit symbolize", out+errOut)

	// snapshot: the thread's name and the Python frames, text and JSON.
	for _, format := range []string{"text", "json"} {
		code, out, errOut = runCLI("snapshot", "-p", pid, "--format", format)
		if code != exitOK {
			t.Fatalf("snapshot --format %s: exit %d: %s", format, code, errOut)
		}
		noTerminalControl(t, "snapshot --format "+format, out+errOut)
		if format == "text" && !strings.Contains(out, `x\x1b[2J\x1b]0;t\x07`) {
			t.Errorf("snapshot does not show the thread's name escaped:\n%s", out)
		}
	}

	// record: its summary, its log lines in both formats, the report
	// files it writes, and report reading them again.
	testutil.RequirePerf(t)
	outDir := t.TempDir()
	for _, logFormat := range []string{"text", "json"} {
		code, out, errOut = runCLI("record", "-p", pid, "--duration", "1s", "--snapshot", "--out", outDir, "--log-format", logFormat)
		if code != exitOK {
			t.Fatalf("record: exit %d: %s", code, errOut)
		}
		noTerminalControl(t, "record --log-format "+logFormat, out+errOut)
	}
	dirs, _ := filepath.Glob(filepath.Join(outDir, "*-manual"))
	if len(dirs) == 0 {
		t.Fatal("no capture written")
	}
	for _, f := range []string{capdir.FileText, capdir.FileInfo} {
		b, err := os.ReadFile(filepath.Join(dirs[0], f))
		if err != nil {
			t.Fatal(err)
		}
		noTerminalControl(t, f, string(b))
	}
	for _, format := range []string{"text", "folded", "html", "speedscope"} {
		code, out, errOut = runCLI("report", dirs[0], "--format", format)
		if code != exitOK {
			t.Fatalf("report --format %s: exit %d: %s", format, code, errOut)
		}
		noTerminalControl(t, "report --format "+format, out+errOut)
		if format == "speedscope" && !json.Valid([]byte(out)) {
			t.Errorf("report --format speedscope is not valid JSON once escaped")
		}
		if format == "html" {
			m := regexp.MustCompile(`(?s)<script type="application/json" id="sw-data">(.*?)</script>`).FindStringSubmatch(out)
			if m == nil || !json.Valid([]byte(m[1])) {
				t.Errorf("the page's data is not valid JSON once escaped")
			}
		}
	}
}

// TestErrorsEscaped: an error quoting what a user or target named is
// printed escaped too.
func TestErrorsEscaped(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"report", filepath.Join(t.TempDir(), evilName)}, &stdout, &stderr)
	if code == exitOK || !regexp.MustCompile(regexp.QuoteMeta(escapedEvil)).MatchString(stderr.String()) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	noTerminalControl(t, "an error", stderr.String())
}
