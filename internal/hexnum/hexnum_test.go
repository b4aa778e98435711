package hexnum

import (
	"strconv"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"ff", 255, true}, {"0x7fffDEAD", 0x7fffdead, true}, {"0XA", 10, true},
		{"ffffffffffffffff", ^uint64(0), true}, {"0x", 0, false}, {"", 0, false},
		{"1ffffffffffffffff", 0, false}, {"12g", 0, false}, {"-1", 0, false}, {" 1", 0, false},
	} {
		if v, ok := Parse(tc.in); v != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q) = %#x, %v; want %#x, %v", tc.in, v, ok, tc.want, tc.ok)
		}
		if v, ok := Parse([]byte(tc.in)); v != tc.want || ok != tc.ok {
			t.Errorf("Parse([]byte %q) = %#x, %v", tc.in, v, ok)
		}
	}
}

// FuzzParse: Parse agrees with strconv on every input.
func FuzzParse(f *testing.F) {
	f.Add("0x1f")
	f.Add("ffffffffffffffff")
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := Parse(s)
		digits := s
		if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
			digits = s[2:]
		}
		want, err := strconv.ParseUint(digits, 16, 64)
		// strconv takes underscores only with base 0, and 17+ digits of
		// leading zeros: Parse refuses more than 16 digits.
		wantOK := err == nil && len(digits) <= 16
		if ok != wantOK || ok && v != want {
			t.Fatalf("Parse(%q) = %#x, %v; strconv %#x, %v", s, v, ok, want, err)
		}
	})
}
