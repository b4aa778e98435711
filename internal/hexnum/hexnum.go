// Package hexnum reads the hexadecimal numbers of the text formats
// stallwatch parses from the system (/proc files, kallsyms, perf maps),
// the one way, without allocating. (The capture model's JSON, which
// imports nothing of stallwatch, reads its own with strconv.)
package hexnum

// Parse reads 1 to 16 hex digits, after an optional 0x or 0X, as an
// unsigned 64-bit number; ok is false for anything else (no digits, a
// digit that is not hex, more than 64 bits).
func Parse[T ~string | ~[]byte](s T) (v uint64, ok bool) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
	}
	if len(s) == 0 || len(s) > 16 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}
