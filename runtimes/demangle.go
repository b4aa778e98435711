package runtimes

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// maxDemangle bounds the names given to the demangler, whose time grows
// faster than linearly with a name's length (80,000 bytes took seconds):
// names come from files the target controls. Real C++ names longer than
// this are rare and stay mangled.
const maxDemangle = 4096

// Demangle turns a symbol's name into the one gdb and Go's traceback
// print, whatever it comes from (an ELF file's symbols, a JIT's jitdump
// or perf map), so that one function has one name: C++ (Itanium) and
// Rust names demangled with their full scope and template arguments but
// without parameters or a return type
// ("std::thread::_Invoker<std::tuple<void (*)()> >::_M_invoke<0ul>"), a
// clone's kind kept ("foo [clone .cold]"); the symbol version a .symtab
// appends dropped ("pthread_mutex_lock@@GLIBC_2.2.5"); a PLT stub's
// "@plt" kept ("__tls_get_addr@plt"); Go's ABI suffix dropped
// ("runtime.goexit.abi0" is runtime.goexit). Other names are returned as
// they are.
func Demangle(raw string) string {
	if base, ok := strings.CutSuffix(raw, "@plt"); ok {
		return Demangle(base) + "@plt"
	}
	if i := strings.IndexByte(raw, '@'); i > 0 && !strings.ContainsAny(raw[:i], " :") {
		raw = raw[:i]
	}
	if !strings.HasPrefix(raw, "_Z") && !strings.HasPrefix(raw, "_R") || len(raw) > maxDemangle {
		return trimGoABI(raw)
	}
	d, err := demangle.ToString(raw, demangle.NoParams, demangle.MaxLength(16))
	if err != nil || d == "" {
		return raw // a name is never demangled to nothing ("_RC0")
	}
	// A clone (foo.cold, foo.part.0, foo.isra.0) is another function
	// than its origin: keep what the demangler says of it, as gdb does.
	if i := strings.IndexByte(raw, '.'); i > 0 {
		if full, err := demangle.ToString(raw, demangle.MaxLength(16)); err == nil {
			if j := strings.Index(full, " [clone "); j >= 0 {
				d += full[j:]
			}
		}
	}
	return d
}

// trimGoABI drops the ABI suffix the Go linker gives assembly functions
// and ABI wrappers (".abi0", ".abiinternal"), which Go's own traceback
// does not print.
func trimGoABI(name string) string {
	for _, suf := range []string{".abi0", ".abiinternal"} {
		if base, ok := strings.CutSuffix(name, suf); ok && strings.IndexByte(base, '.') > 0 {
			return base
		}
	}
	return name
}
