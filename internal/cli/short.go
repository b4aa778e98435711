package cli

// shortNames are the one-letter forms of flags, one table for every
// command: a letter means the same flag wherever it is given, and a flag
// has its letter in every command that takes it (-p is --pid in record,
// snapshot, watch, jit and ctl alike). The letters are those a user of
// perf, strace and the shell's own tools tries first.
var shortNames = map[string]string{
	"pid":      "p", // perf -p, strace -p, gdb -p
	"duration": "d", // record -d 30s
	"freq":     "F", // perf record -F
	"quiet":    "q", // perf -q, grep -q
	"output":   "o", // perf -o, sort -o, a compiler's -o
	"config":   "c", // a daemon's configuration file
}
