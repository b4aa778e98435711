// Package symbolize turns addresses sampled from a target process into
// frames a person can read: kernel functions from /proc/kallsyms, native
// functions (with file and line where the binary has them) from ELF files
// read through the target's root, and JIT-compiled functions from the
// target's jitdump and perf-map files at the time each sample was taken.
//
// A Process holds everything about one target that symbolization needs,
// read at capture time (the target may be gone by the time a report is
// written). Work is cached per mapping, never done per address.
package symbolize
