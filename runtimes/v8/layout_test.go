package v8

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestNodeConstants reads the layout of the node on the machine from its
// symbols, and checks that the constants the unit tests use are its own
// when it is Node.js 20's V8.
func TestNodeConstants(t *testing.T) {
	node, err := filepath.EvalSymlinks(testutil.RequireTool(t, "node"))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := os.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	f, err := objfile.Open(fd, node)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := LoadLayout(f)
	if err != nil {
		t.Fatalf("%s: %v", node, err)
	}
	out, err := exec.Command(node, "-p", "process.versions.v8").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Version.String(); got+"-node" != string(out[:len(got)+5]) {
		t.Fatalf("version %s from the symbols, node says %s", got, out)
	}
	if l.Version != (Version{11, 3, 244, 8}) {
		testutil.Skip(t, "node runs V8 %s, not Node.js 20's", l.Version)
	}
	have, err := f.DataInts("v8dbg_")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range node20() {
		if _, ok := have[name]; !ok && name[0] == '_' {
			continue // a version symbol
		}
		if have[name] != v {
			t.Errorf("%s is %d in %s, %d in the tests", name, have[name], node, v)
		}
	}
	if l.code == nil || l.bytecodeSizes == nil {
		t.Errorf("optimized code layout %v, bytecode sizes %d", l.codeErr, len(l.bytecodeSizes))
	}
}
