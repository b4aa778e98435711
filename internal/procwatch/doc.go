// Package procwatch finds the processes of the host as they come: a scan
// of /proc, and the kernel's process connector (netlink) that announces
// each exec at once where stallwatch may listen to it (root in the host's
// namespaces: it needs CAP_NET_ADMIN), with a socket filter so that the
// host's forks and thread exits wake no one (only the events asked for
// reach the socket) — except the forks of the processes a caller names
// (SetForkParents: a prefork server's workers execute nothing), which the
// filter names one by one. It reads what a daemon's rules
// select processes by: the command line, the executable, the effective
// user, the cgroup and from it the container id and the Kubernetes pod.
//
// Everything read here describes a process stallwatch does not trust:
// reads are bounded and a process that vanishes between two reads is
// reported as procfs.ErrGone. A process is known by its ID, the pid and
// its start time, so that a pid the kernel reuses is a new process.
package procwatch
