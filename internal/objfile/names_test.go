package objfile

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestLookupNames finds data, function and undefined-elsewhere symbols
// of Debian's python3 (stripped: .dynsym only) and of a pyenv libpython
// (.symtab too) as debug/elf lists them, and the sections as their
// headers say.
func TestLookupNames(t *testing.T) {
	for _, path := range []string{"/usr/bin/python3.11", "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"} {
		t.Run(path, func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				testutil.Skip(t, "%s: %v", path, err)
			}
			fd, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Open(fd, path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			names := []string{"_PyRuntime", "Py_Version", "PyCode_Type", "_PyEval_EvalFrameDefault", "take_gil", "no_such_symbol"}
			got, err := f.LookupNames(names)
			if err != nil {
				t.Fatal(err)
			}
			ef, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			want := map[string]Named{}
			dyn, _ := ef.DynamicSymbols()
			all, _ := ef.Symbols()
			for _, s := range append(dyn, all...) {
				if _, have := want[s.Name]; !have && s.Section != elf.SHN_UNDEF {
					want[s.Name] = Named{Addr: s.Value, Size: s.Size}
				}
			}
			for _, n := range names {
				if got[n] != want[n] {
					t.Errorf("%s: %+v, debug/elf says %+v", n, got[n], want[n])
				}
			}
			if _, ok := got["_PyRuntime"]; !ok {
				t.Errorf("_PyRuntime not found")
			}
			var runtimeSec bool
			for _, s := range f.Sections() {
				h := ef.Section(s.Name)
				if h == nil || h.Addr != s.Addr || h.Size != s.Size || s.Writable != (h.Flags&elf.SHF_WRITE != 0) {
					t.Errorf("section %+v, the header says %+v", s, h)
				}
				runtimeSec = runtimeSec || s.Name == ".PyRuntime"
			}
			if !runtimeSec {
				t.Errorf("no .PyRuntime section listed")
			}
		})
	}
}
