package objfile

import (
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestDataInts reads a binary's integer data symbols as V8's postmortem
// table holds them, from its static symbol table and, stripped, from its
// dynamic one.
func TestDataInts(t *testing.T) {
	want := map[string]int64{"v8dbg_off_fp_function": -16, "v8dbg_SmiTag": 0, "v8dbg_short": 300, "v8dbg_byte": -2, "v8dbg_long": 1 << 40}
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"symtab", nil},
		{"dynsym of a stripped binary", []string{"-rdynamic", "-s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := openTest(t, testutil.BuildC(t, "symbols/dataints.c", tc.flags...))
			got, err := f.DataInts("v8dbg_")
			if err != nil || !maps.Equal(got, want) {
				t.Errorf("DataInts: %v, %v; want %v", got, err, want)
			}
			b, err := f.DataBytes("table")
			if err != nil || !slices.Equal(b, []byte{1, 2, 3, 5, 8, 13}) {
				t.Errorf("DataBytes(table): %v, %v", b, err)
			}
			if b, err := f.DataBytes("no_such_symbol"); b != nil || err != nil {
				t.Errorf("DataBytes of a missing symbol: %v, %v", b, err)
			}
		})
	}
}

func openTest(t *testing.T, path string) *File {
	t.Helper()
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(fd, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}
