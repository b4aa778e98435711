package upload

import "testing"

// FuzzParseURL: any string gives a base URL or an error, never a panic;
// a base URL it gives is a fixed point.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"http://agent:8126", "https://a/b/", "http://a:1/profiling/v1/input", "/run/apm.socket", "unix:///x", "unix://h/x", "agent:8126", "http://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseURL(s)
		if err != nil {
			return
		}
		b, err := ParseURL(a)
		if err != nil || a != b {
			t.Fatalf("%q → %q → %q, %v", s, a, b, err)
		}
	})
}
