// Package attach asks a running HotSpot JVM to run a diagnostic command
// (jcmd's Compiler.perfmap, Thread.print -l) through the attach mechanism
// jcmd and jstack use, with no flag set when the JVM started.
//
// The JVM listens on a Unix socket, /tmp/.java_pid<pid> in its own mount
// namespace, once its attach listener runs; it starts the listener when
// it receives SIGQUIT and finds a file .attach_pid<pid> in its working
// directory or /tmp owned by its own user (attachListener_linux.cpp). A
// request is the protocol version and the command, NUL-separated
// ("1\0jcmd\0Thread.print -l\0\0\0"); the answer is a result code on its
// first line, then the command's output.
//
// It lives apart from package runtimes/hotspot, whose readers are pure:
// this package acts on the process — it signals it, creates a file in its
// directories and connects to its socket — and does it as the target's
// own user (the JVM accepts a peer with its euid and egid, or root, and
// trusts only a trigger file its user owns; in a user namespace the
// host's root is neither), on a thread of its own whose credentials are
// switched and which ends with them (so the rest of the process keeps
// its own), and through /proc/<pid>/root and /proc/<pid>/cwd, so a JVM
// in a container is reached in its mount namespace with the pid it sees
// for itself.
//
// SIGQUIT is dangerous: a JVM started with -Xrs (-XX:+ReduceSignalUsage)
// has no handler for it and dies; one with -XX:+DisableAttachMechanism
// prints a thread dump to its standard output instead. Before anything
// is sent, Open checks that the process catches SIGQUIT (SigCgt in
// /proc/<pid>/status: the kernel's word for it), that the VM's flags (the
// caller's Flags, read from the VM's memory, else its command line and
// JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, _JAVA_OPTIONS) allow attaching,
// and refuses with *RefusedError saying why. A JVM whose listener already
// runs (a socket owned by its user exists) is never signalled.
//
// Every wait is bounded by the caller's context: a JVM stuck at a
// safepoint does not start its listener nor answer, and the caller goes
// on without it (ErrNoAnswer). A trigger file left while the JVM did not
// answer is removed by Close; such a JVM, once it resumes, runs what was
// asked (or prints a thread dump, if the trigger is gone by then), as it
// would after jcmd.
package attach
