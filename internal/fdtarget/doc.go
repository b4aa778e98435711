// Package fdtarget says what a descriptor of a process is connected to:
// the file, socket, pipe, epoll set, eventfd, signalfd or timerfd behind
// it, and the process at its other end. A thread blocked in
// recvfrom(fd 5) waits on "TCP 10.0.0.5:5432 (ESTABLISHED, 0 bytes
// queued; from 10.0.0.7:40122) — pid 812 (postgres), sleeping"; one
// blocked in write(fd 7) on "pipe:[4411] read by pid 812 (logger), which
// is stopped".
//
// Everything is read from the process's own view. Its /proc/<pid>/fd
// link and fdinfo give the kind, offset and open flags (proc.rst 3.8:
// eventfd counters, signalfd masks, timerfd settings, the "tfd:" lines of
// an epoll set); a file's path has the process's root removed (a
// container's or chroot's files by the path it uses), its st_dev names
// the block device. A socket's protocol is its inode's
// system.sockprotoname attribute; TCP and UDP sockets are found in
// /proc/<pid>/net/{tcp,tcp6,udp,udp6}, which is the process's own network
// namespace; UNIX sockets are asked of sock_diag (linux/unix_diag.h: name,
// peer inode, queue lengths) over a NETLINK_SOCK_DIAG socket made in that
// namespace — on an OS thread that enters it (setns, CAP_SYS_ADMIN) for
// the socket(2) call alone and comes back, or else never returns to the
// Go scheduler. Without sock_diag, /proc/<pid>/net/unix gives the name and
// state, and no peer.
//
// The other end: a pipe's or FIFO's other descriptors, a UNIX socket's
// peer socket, a TCP or UDP connection's peer socket when it is in the
// same namespace (its addresses mirrored in the tables), or, for a
// connection no process has accepted yet, its listener. Whose descriptors
// they are is found by one scan of every process's /proc/<pid>/fd links,
// bounded (Options.MaxScan): a process with more descriptors than half the
// bound is looked at last. Each holder is named with its state (running,
// sleeping, stopped, traced, exited) and, when the caller names system
// calls (Options.Syscall), a thread of it blocked on that very
// descriptor.
//
// # Bounds and trust
//
// A Resolve does constant work per descriptor asked about, except an
// epoll set's fdinfo (the kernel prints every item; the first
// Options.MaxEpoll are resolved, the rest counted) and the socket tables
// (read once per table, stopped when every socket is found, bounded in
// bytes), plus the one bounded scan. Names in these files are chosen by
// the target and its peers — paths, UNIX socket names, process names — and
// a UNIX socket's path may hold a newline that forges a line of
// /proc/net/unix: an inode found twice there is not believed. Every
// parser is fuzzed, and Target.String escapes every such name
// (internal/termsafe).
//
// Target.Model is what the capture model keeps of it (model.WaitTarget,
// a Wait's On in threads.json).
package fdtarget
