// Package procwatch finds the processes of the host as they come: a scan
// of /proc, and the kernel's process connector (netlink) that announces
// each exec at once where stallwatch may listen to it (root in the host's
// namespaces: it needs CAP_NET_ADMIN), with a socket filter so that only
// the events asked for reach the socket (execs, process exits, and the
// forks of the processes a caller names — SetForkParents: a prefork
// server's workers execute nothing — which the filter names one by one).
// A paced reader (Connector.RunBatches) reads them 64 datagrams a system
// call on CLOCK_MONOTONIC's grid of its period, with the socket in no
// epoll set while they come: a host that forks 50 processes a second
// wakes it 10 times a second, not 100. CmdlineReader reads the command
// line of each exec into one buffer, allocating nothing. It reads what a
// daemon's rules
// select processes by: the command line, the executable, the effective
// user, the cgroup and from it the container id and the Kubernetes pod.
//
// Everything read here describes a process stallwatch does not trust:
// reads are bounded and a process that vanishes between two reads is
// reported as procfs.ErrGone. A process is known by its ID, the pid and
// its start time, so that a pid the kernel reuses is a new process.
package procwatch
