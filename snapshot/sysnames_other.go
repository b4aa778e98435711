//go:build !amd64

package snapshot

// syscallNames is empty off x86-64: system calls are shown by number.
var syscallNames = map[int]string{}
