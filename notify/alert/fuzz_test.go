package alert

import "testing"

// FuzzParseAddr: any string from a flag or the environment gives an
// address or an error, never a panic; an address it gives is a fixed
// point (parsing it again gives it back).
func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"udp://127.0.0.1:8125", ":9999", "agent", "/run/dsd.socket", "unix:///x", "unixgram:///x", "[fd00::1]:8125", "http://x", "udp://", "unix://h/p"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddr(s)
		if err != nil {
			return
		}
		b, err := ParseAddr(a)
		if err != nil || a != b {
			t.Fatalf("%q → %q → %q, %v", s, a, b, err)
		}
	})
}
