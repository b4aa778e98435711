package procfs

import (
	"os"
	"testing"
)

// BenchmarkParseStatus: one thread's status file as the kernel writes it
// (this process's own), parsed as a snapshot parses one per thread.
func BenchmarkParseStatus(b *testing.B) {
	text, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseStatus(text); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseStatus: any text parses without a panic, and a status that
// parses has the Pid the file must have.
func FuzzParseStatus(f *testing.F) {
	if text, err := os.ReadFile("/proc/self/status"); err == nil {
		f.Add(text)
	}
	f.Add([]byte("Name:\tjulia\nState:\tS (sleeping)\nPid:\t78\nNSpid:\t78\t5\nUid:\t1\t2\t3\t4\t5\n"))
	f.Add([]byte("Pid:\nState:\nCapEff:\tzz\n:\n\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		s, err := ParseStatus(text)
		if err == nil && s.Pid == 0 {
			t.Fatalf("ParseStatus(%q) = Pid 0 without an error", text)
		}
	})
}
