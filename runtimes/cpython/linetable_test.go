package cpython

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestLineTablesMatchCPython decodes the line tables each installed
// CPython compiles real sources to (testdata/gaps.py, which needs every
// long form, and modules of its own standard library) and checks every
// instruction's line against what that CPython's PyCode_Addr2Line says.
func TestLineTablesMatchCPython(t *testing.T) {
	testutil.EndToEnd(t)
	for _, py := range headerBuilds {
		t.Run(py, func(t *testing.T) {
			python := testutil.RequireTool(t, py)
			out, err := exec.Command(python, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])").Output()
			if err != nil {
				t.Fatal(err)
			}
			stdlib := string(bytes.TrimSpace(out))
			args := []string{"testdata/linetables.py", "testdata/gaps.py"}
			for _, m := range []string{"threading.py", "json/decoder.py", "dataclasses.py", "argparse.py"} {
				args = append(args, filepath.Join(stdlib, m))
			}
			cmd := exec.Command(python, args...)
			b, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			checkTables(t, python, b)
		})
	}
}

func checkTables(t *testing.T, python string, b []byte) {
	out, err := exec.Command(python, "-c", "import sys; print(sys.version_info[1])").Output()
	if err != nil {
		t.Fatal(err)
	}
	var minor int
	if err := json.Unmarshal(bytes.TrimSpace(out), &minor); err != nil {
		t.Fatal(err)
	}
	format := layouts[minor].LineTable
	var codes, instrs, noLine int
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var c struct {
			Name   string
			First  int
			Table  string
			Lines  []int
			Before int
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		table, err := hex.DecodeString(c.Table)
		if err != nil {
			t.Fatal(err)
		}
		codes++
		if got, _ := addr2line(format, table, c.First, -1); got != c.Before {
			t.Errorf("%s: before its first instruction line %d, CPython says %d", c.Name, got, c.Before)
		}
		for i, want := range c.Lines {
			instrs++
			got, ok := addr2line(format, table, c.First, i*codeUnitBytes)
			if !ok {
				got = -1
				noLine++
			}
			if got != want {
				t.Errorf("%s (first line %d): offset %d: line %d, CPython says %d", c.Name, c.First, i*codeUnitBytes, got, want)
				break
			}
		}
	}
	if codes < 100 {
		t.Fatalf("only %d code objects compared", codes)
	}
	t.Logf("%s: %d code objects, %d instructions (%d without a line)", format, codes, instrs, noLine)
}
