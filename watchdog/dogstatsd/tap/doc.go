// Package tap is a passive DogStatsD heartbeat: it reads the datagrams
// that services on this host already send to the Datadog agent's UDP port
// from a packet socket (AF_PACKET, CAP_NET_RAW), names the process that
// sent each one, and gives each watched process a heartbeat source that
// beats when one of its datagrams carries a matching metric.
//
// Nothing passes through stallwatch: the agent receives every datagram as
// before, whether stallwatch runs or not. The kernel copies to the tap
// only what a classic BPF filter (SO_ATTACH_FILTER) lets through: UDP to
// the port, IPv4 (first fragments) or IPv6 (without extension headers),
// received by this host — not the outgoing copy of a loopback datagram,
// so each is seen once.
//
// Over loopback, the kernel names a datagram's sender: an eBPF socket
// filter on the packet socket sees each datagram's outgoing copy, which
// the loopback device (it has no queue) hands over in the sending task,
// records that task's process under the datagram's source, IPv4 id and
// length in a BPF ring buffer, and drops the copy; the received copy, the
// one read, is looked up in what the tap read of the ring, in place, with
// no system call (a hash map's look-up, one a datagram, was a fifth of an
// idle daemon's CPU). A record the ring had no room for (more than ~25,000
// datagrams between two reads) leaves its datagram to be named by its
// socket, as below. A client that opens a socket per datagram (bash's /dev/udp)
// and each of the workers that share a prefork server's socket are then
// told apart, each beat its sender's. Kernels whose socket filters may
// not call bpf_get_current_pid_tgid (before 6.10) refuse the filter, and
// the tap says so and names senders by their sockets alone, as below.
//
// Otherwise (another namespace; a sender the filter did not see), a
// datagram beats only for the socket that can have sent it — never for
// a port alone. Its sender's network namespace is the tap's own when it
// arrived on loopback (nothing sent from this namespace to this host
// arrives any other way), else the namespace of a watched process whose
// own address is the datagram's source (a container's); in it, the
// sockets of the datagram's family bound to its source address, or to
// the wildcard, and its port (/proc/PID/net/udp and udp6) are the ones
// that can have sent it. An AF_INET6 wildcard socket counts for IPv4 only
// when it is not IPV6_V6ONLY (asked of a watched process's own socket
// through a duplicate of its descriptor, pidfd_getfd). When every such
// socket is held by watched processes (/proc/PID/fd, socket:[inode]),
// each of them beats; when one is held by a process not watched, the
// datagram is no one's — the other process may have sent it. A socket
// shared by several watched processes (a prefork server's) is logged
// once: the tap cannot tell their datagrams apart. The tables are read
// again when the watched processes change and at most once a second
// while datagrams come, so a socket closed and its port taken by another
// process stays its old holder's for at most a second.
//
// DogStatsD's container field (|c:ID, or |c:in-INODE for a cgroup) is
// believed only from a datagram that came from the named container's own
// network namespace (not the tap's: any process of the host can write a
// container's id, which /proc/PID/cgroup shows to everyone), for the one
// watched process of that container there.
//
// What the tap cannot see without the filter: who sent from a socket
// closed before its datagram was read (a socket per datagram), or which
// of the processes sharing a socket sent; in another namespace, neither
// (the received copy comes in softirq, in no sender's task). Nor a host
// on the network that forges a container's source address (that needs
// raw sockets on the path, and is the network's to stop).
//
// The packets arrive in a TPACKET_V3 ring shared with the kernel
// (PACKET_RX_RING): the kernel hands over a block of datagrams when it is
// full or 100 ms after its first, and one wake-up reads the whole block in
// place — a host's DogStatsD traffic costs a few wake-ups a second, not
// one per datagram, and a beat is seen at most 100 ms after it was sent.
//
// Packets come from the network and datagrams from processes stallwatch
// does not trust: headers are checked against the captured length, lines
// are read in place, nothing is allocated per datagram. What the kernel
// drops for want of room in the ring (PACKET_STATISTICS) is counted and
// logged: a dropped datagram may be a missed heartbeat.
//
// The DogStatsD proxy (dogstatsd.Proxy) stays for what a packet
// socket cannot see: a unix socket, and a single process whose metrics
// are sent to stallwatch on purpose.
package tap
