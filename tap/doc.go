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
// A datagram's sender is found from its source address and port: the
// watched processes' sockets (/proc/PID/fd, socket:[inode]) are looked up
// in their network namespace's UDP tables (/proc/PID/net/udp and udp6),
// which give each socket's local address. The table is cached and read
// again, at most once a second, when a datagram comes from an address it
// does not know, and when a process is added. A datagram from an unknown
// address that carries DogStatsD's container field (|c:ID, or |c:in-INODE
// for a cgroup) is given to the one watched process of that container.
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
// The DogStatsD proxy (watchdog.StatsdProxy) stays for what a packet
// socket cannot see: a unix socket, and a single process whose metrics
// are sent to stallwatch on purpose.
package tap
