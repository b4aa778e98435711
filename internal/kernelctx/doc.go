// Package kernelctx reads the kernel's side of why a process did not run:
// its cgroups, the CPU bandwidth throttling of its cgroup and of every
// cgroup above it that sets a quota, pressure stall information (PSI) of
// the host and of its v2 cgroup, how the host's CPUs spent their time
// (steal, iowait), the host's reclaim and OOM kills, its memory cgroup's
// limit and what hitting it cost, and each thread's major faults and
// context switches.
//
// A Reading is those counters at one moment; Between makes a
// model.KernelContext of two (capture.json's "kernel"), the deltas a capture
// shows and its findings judge: "throttled in 92% of its 100 ms periods
// by /kubepods/pod1 (quota 20 ms)" is its Throttling, not an average
// since boot. Readings are cheap where they
// can be (a few dozen small files, well under a millisecond) and costly
// only where the kernel makes them so: the per-thread counters are two
// files per thread (Read's threads argument), read into one reused
// buffer.
//
// # Where the files are
//
// /proc/<pid>/cgroup names the process's cgroup in each hierarchy, as a
// path from the hierarchy's root seen from the reader's cgroup namespace;
// /proc/self/mountinfo says where each hierarchy is mounted here and
// which subtree each mount shows (its root field). A cgroup is read on a
// mount that shows it (Locate), and its parents up to that mount's root
// (Dir.Parent): cgroups above it are not visible here and are not
// guessed. The cpu and memory controllers are read where they are bound:
// a v1 hierarchy when one has them (cgroup v1 cpu.stat, cpu.cfs_quota_us,
// cpu.cfs_period_us; memory.limit_in_bytes, memory.failcnt,
// memory.oom_control), else the unified hierarchy (cpu.stat, cpu.max;
// memory.max, memory.high, memory.events), as
// Documentation/admin-guide/cgroup-v2.rst and
// Documentation/scheduler/sched-bwc.rst describe them. PSI is
// Documentation/accounting/psi.rst's /proc/pressure/{cpu,memory,io} and,
// for a v2 cgroup other than the root, its {cpu,memory,io}.pressure.
//
// # Trust
//
// The kernel writes these files, but names in them are chosen by whoever
// made the cgroups (a container runtime, or the target itself with a
// delegated subtree): a cgroup's name may hold a newline, which the kernel
// prints as it is, so only the first line of each hierarchy is believed,
// and a path with ".." elements (a cgroup outside the reader's namespace)
// is never joined to a mount point. Every read is bounded, every parser
// tolerates malformed lines, counters that go down (a cgroup made anew
// under the same name) are not turned into deltas, and every parser is
// fuzzed.
package kernelctx
