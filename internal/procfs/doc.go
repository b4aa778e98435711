// Package procfs reads what stallwatch needs from /proc about a target
// process and its threads: mappings, status (with the capability sets),
// scheduler counters, the current system call and the kernel stack, and
// it opens files through the target's root directory without following
// links out of it. It is also the one reader of the kernel's settings
// under /proc/sys (Sysctl).
//
// Everything under /proc/<pid> is written by the kernel but describes a
// process we do not trust (its name, its paths), and it can vanish at any
// moment: every read is bounded, every parser tolerates malformed lines, and a
// process or thread that has exited is reported as ErrGone.
package procfs
