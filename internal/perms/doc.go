// Package perms is what each operation stallwatch asks of the kernel
// needs, in one table (Table: the capability that grants it, the kernel
// setting that can allow it instead, the flag that does without it, what
// is lost without it), and the explanations made from it: the
// permission errors of the code that meets a refusal (*Error: what was
// tried, what is missing, the fix; commands turn one into exit code 3),
// the notes of what a capture goes without, preflight's checks (package
// internal/preflight) and the README's setcap line, which a test keeps
// equal to SetcapAll.
//
// Advice is for the process that gets it (Self, read from /proc/self): a
// user without a capability is told the setcap, the sysctl or the flag
// that grants or avoids it, and that root may; root, or a process that
// holds the capability, is never told to run as root: it is told why
// holding it was not enough — a user namespace of its own, a security
// module's label, a seccomp filter, Yama's ptrace_scope 3 — or that its
// container or unit dropped the capability from its bounding set.
package perms
