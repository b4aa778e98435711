// Package snapshot takes a picture of every thread of a process as it
// stands: state, what it waits in, how long it has waited, its kernel and
// user stacks, and which thread holds the lock it waits for. It is the core
// of a hang report: a frozen process does not run, so a sampler sees
// nothing of it.
//
// User stacks are read under a brief per-thread ptrace stop (PTRACE_SEIZE
// and PTRACE_INTERRUPT, then an immediate detach), or without any stop at
// all (Options.NoPtrace) from /proc and process_vm_readv.
package snapshot
