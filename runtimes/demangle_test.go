package runtimes

import (
	"strings"
	"testing"
)

func TestDemangle(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"_ZN5stall6Worker4spinEi", "stall::Worker::spin"},
		{"_Z3fooi.cold", "foo [clone .cold]"},
		{"_ZNSt11this_thread9sleep_forIlSt5ratioILl1ELl1EEEEvRKNSt6chrono8durationIT_T0_EE", "std::this_thread::sleep_for<long, std::ratio<1l, 1l> >"}, // no return type
		{"_ZNSt6thread4joinEv@plt", "std::thread::join@plt"},
		{"__tls_get_addr@plt", "__tls_get_addr@plt"},
		{"runtime.goexit.abi0", "runtime.goexit"},
		{"runtime.morestack.abi0", "runtime.morestack"},
		{"_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"}, // Rust, legacy mangling
		{"_RNvCs1234_7mycrate3foo", "mycrate::foo"},                    // Rust, v0 mangling
		{"main.stallingWork", "main.stallingWork"},                     // Go: untouched
		{"write", "write"}, // C
		{"pthread_mutex_lock@@GLIBC_2.2.5", "pthread_mutex_lock"},        // versioned symbol
		{"_ZN5stall6Worker4spinEi@GLIBC_PRIVATE", "stall::Worker::spin"}, // both
		{"_Z", "_Z"},     // broken: as it is
		{"_RC0", "_RC0"}, // demangles to nothing: as it is
		{"JS:*fibonacci /app/fib.js:1:1", "JS:*fibonacci /app/fib.js:1:1"},                   // not ours to change
		{"_ZN" + strings.Repeat("1a", 4000) + "E", "_ZN" + strings.Repeat("1a", 4000) + "E"}, // too long to try
	} {
		if got := Demangle(tc.raw); got != tc.want {
			if len(got) > 80 {
				got = got[:80] + "..."
			}
			t.Errorf("Demangle(%.40q) = %q, want %.80q", tc.raw, got, tc.want)
		}
	}
}

// FuzzDemangle: whatever a file or a JIT names a function, Demangle gives
// it a name, never nothing, and never a panic.
func FuzzDemangle(f *testing.F) {
	for _, s := range []string{"_ZN5stall6Worker4spinEi", "_Z3fooi.cold", "_ZNSt6thread4joinEv@plt", "_RNvCs1234_7mycrate3foo", "_RC0", "runtime.goexit.abi0", "x@@V"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if d := Demangle(raw); d == "" && raw != "" {
			t.Fatalf("Demangle(%q) is empty", raw)
		}
	})
}
