package procfs

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// BenchmarkParseMaps: the map of a process of 1,000 threads (this
// process's own map with a stack and its guard page for each thread),
// which a snapshot of it reads.
func BenchmarkParseMaps(b *testing.B) {
	own, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		b.Fatal(err)
	}
	var text strings.Builder
	text.Write(own)
	for i := range 1000 {
		base := 0x7f0000000000 + uint64(i)<<23
		fmt.Fprintf(&text, "%x-%x ---p 00000000 00:00 0 \n", base, base+0x1000)
		fmt.Fprintf(&text, "%x-%x rw-p 00000000 00:00 0 \n", base+0x1000, base+0x801000)
	}
	s := text.String()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMaps(s); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseMaps: any text parses without a panic, and a mapping's path
// never keeps the " (deleted)" the kernel appends (unless the text
// held it twice).
func FuzzParseMaps(f *testing.F) {
	if own, err := os.ReadFile("/proc/self/maps"); err == nil {
		f.Add(string(own))
	}
	f.Add("7f1e2d000000-7f1e2d001000 r-xp 00000000 00:1f 77                         /tmp/jit-42.dump (deleted)\n")
	f.Add("55d0c6a00000-55d0c6a02000 r--p 00000000 fd:01 1311234   /usr/bin/my prog\n\n")
	f.Add("zzzz r-xp 0 0 0\n")
	f.Fuzz(func(t *testing.T, text string) {
		maps, err := ParseMaps(text)
		if err != nil {
			return
		}
		for _, m := range maps {
			if strings.HasSuffix(m.Path, " (deleted)") && !strings.Contains(text, " (deleted) (deleted)") {
				t.Fatalf("mapping %+v keeps the kernel's suffix", m)
			}
		}
	})
}
