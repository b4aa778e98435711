package snapshot

import "testing"

func TestParseExecStart(t *testing.T) {
	tests := []struct {
		text string
		ns   uint64
		ok   bool
	}{
		{"head (1, #threads: 1)\n---\nse.exec_start                                :       1903909.702892\nse.vruntime : 1.0\n", 1903909702892, true},
		{"se.exec_start : 12\n", 12_000_000, true},
		{"se.exec_start : 12.5\n", 12_500_000, true},
		{"se.exec_start : -1.0\n", 0, false},
		{"se.exec_start : 99999999999999999999.0\n", 0, false},
		{"se.vruntime : 1.0\n", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		ns, ok := parseExecStart([]byte(tc.text))
		if ns != tc.ns || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.text, ns, ok, tc.ns, tc.ok)
		}
	}
}

func FuzzParseExecStart(f *testing.F) {
	f.Add([]byte("se.exec_start                                :       1903909.702892\n"))
	f.Add([]byte("se.exec_start : 1.2345678901\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseExecStart(b)
	})
}
