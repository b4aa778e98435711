// waits: threads blocked on descriptors whose other ends are other
// processes, for tests that name what each wait waits on:
//
//   tcp-recv    recv() on a TCP connection to "server", a child that
//               accepts it and never answers
//   pipe-write  write() to a pipe read by "logger", a child that reads
//               it (until a test stops it: then the pipe fills and the
//               write blocks)
//   epoll       epoll_wait() on three sockets: a TCP connection to the
//               server, a bound UDP socket and one end of a socketpair
//   unix-recv   read() on a UNIX stream socket connected to "unixpeer",
//               a child listening on PATH (argv[1]) that accepts and
//               never writes
//   backlog     recv() on a TCP connection that "backlog", a child
//               listening on another port, never accepts
//   unix-backlog read() on a UNIX stream socket connected to PATH.backlog,
//               where "unixbacklog", a child, listens and never accepts
//
// Each child dies with its parent (PR_SET_PDEATHSIG). Prints "ready
// tcp=TID pipe=TID epoll=TID unix=TID backlogtid=TID unixbacklogtid=TID
// server=PID logger=PID unixpeer=PID backlog=PID unixbacklog=PID
// port=PORT backlogport=PORT" once every thread is on its way to
// blocking.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

enum { TCP, PIPE, EPOLL, UNIX, BACKLOG, UNIXBACKLOG, N };
static atomic_int tids[N];
static int tcpfd, tcpfd2, pipew, udpfd, pairfd, unixfd, epfd, backlogfd, unixbacklogfd;

static void die(const char *what) {
	perror(what);
	exit(1);
}

// child forks a process named name that dies with its parent and keeps
// only descriptors keep and keep2 of those above stderr: a test that
// looks for who holds a file finds the holders it made, not inherited
// copies. It returns in the parent once the child is named.
static pid_t child(const char *name, int keep, int keep2) {
	int sync[2];
	if (pipe(sync) != 0)
		die("pipe");
	pid_t p = fork();
	if (p < 0)
		die("fork");
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		prctl(PR_SET_NAME, name);
		for (int fd = 3; fd < 1024; fd++)
			if (fd != keep && fd != keep2 && fd != sync[1])
				close(fd);
		if (write(sync[1], "n", 1) != 1)
			die("write");
		close(sync[1]);
		return 0;
	}
	close(sync[1]);
	char c;
	if (read(sync[0], &c, 1) != 1)
		die("the child did not start");
	close(sync[0]);
	return p;
}

// serve_tcp accepts connections, never answers them, and says on
// notify that it accepted one (the connection is then held by this
// process, not waiting in the listener's queue).
static void serve_tcp(int lfd, int notify) {
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		if (c < 0 || write(notify, "a", 1) != 1)
			die("accept");
	}
}

static void await_accepts(int notify, int n) {
	char c;
	for (int i = 0; i < n; i++)
		if (read(notify, &c, 1) != 1)
			die("the server did not accept");
}

static void read_pipe(int rfd) {
	char buf[4096];
	for (;;)
		if (read(rfd, buf, sizeof buf) <= 0)
			exit(0);
}

static void serve_unix(int lfd, int notify) {
	int c = accept(lfd, NULL, NULL);
	if (c < 0 || write(notify, "a", 1) != 1)
		die("accept unix");
	for (;;)
		pause();
}

static void set_tid(int i, const char *name) {
	pthread_setname_np(pthread_self(), name);
	atomic_store(&tids[i], (int)syscall(SYS_gettid));
}

static void *tcp_recv(void *arg) {
	set_tid(TCP, "tcp-recv");
	char c;
	recv(tcpfd, &c, 1, 0);
	return arg;
}

static void *backlog_recv(void *arg) {
	set_tid(BACKLOG, "backlog");
	char c;
	recv(backlogfd, &c, 1, 0);
	return arg;
}

static void *unix_backlog_recv(void *arg) {
	set_tid(UNIXBACKLOG, "unix-backlog");
	char c;
	read(unixbacklogfd, &c, 1);
	return arg;
}

static void *pipe_write(void *arg) {
	set_tid(PIPE, "pipe-write");
	static char buf[4096];
	memset(buf, 'l', sizeof buf);
	for (;;)
		if (write(pipew, buf, sizeof buf) < 0)
			die("write pipe");
	return arg;
}

static void *epoll_waiter(void *arg) {
	set_tid(EPOLL, "epoll");
	struct epoll_event ev;
	epoll_wait(epfd, &ev, 1, -1);
	return arg;
}

static void *unix_recv(void *arg) {
	set_tid(UNIX, "unix-recv");
	char c;
	read(unixfd, &c, 1);
	return arg;
}

static int tcp_connect(int port) {
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
		die("connect");
	return fd;
}

// tcp_listen listens on an ephemeral loopback port.
static int tcp_listen(int *port) {
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 16) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) != 0)
		die("listen");
	*port = ntohs(a.sin_port);
	return lfd;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: waits UNIX-SOCKET-PATH\n");
		return 2;
	}
	// The TCP server.
	int port;
	int lfd = tcp_listen(&port);
	int accepted[2];
	if (pipe(accepted) != 0)
		die("pipe");
	pid_t server = child("server", lfd, accepted[1]);
	if (server == 0)
		serve_tcp(lfd, accepted[1]);
	close(lfd);
	close(accepted[1]);
	tcpfd = tcp_connect(port);
	tcpfd2 = tcp_connect(port);
	await_accepts(accepted[0], 2);
	close(accepted[0]);

	// The listener that never accepts.
	int backlogport;
	int bfd = tcp_listen(&backlogport);
	pid_t backlog = child("backlog", bfd, -1);
	if (backlog == 0)
		for (;;)
			pause();
	close(bfd);
	backlogfd = tcp_connect(backlogport);

	// The logger and its pipe.
	int p[2];
	if (pipe(p) != 0)
		die("pipe");
	pid_t logger = child("logger", p[0], -1);
	if (logger == 0)
		read_pipe(p[0]);
	close(p[0]);
	pipew = p[1];

	// The UNIX peer, listening on argv[1].
	struct sockaddr_un u = {.sun_family = AF_UNIX};
	strncpy(u.sun_path, argv[1], sizeof u.sun_path - 1);
	int ul = socket(AF_UNIX, SOCK_STREAM, 0);
	unlink(argv[1]);
	if (ul < 0 || bind(ul, (struct sockaddr *)&u, sizeof u) != 0 || listen(ul, 4) != 0)
		die("listen unix");
	if (pipe(accepted) != 0)
		die("pipe");
	pid_t unixpeer = child("unixpeer", ul, accepted[1]);
	if (unixpeer == 0)
		serve_unix(ul, accepted[1]);
	close(ul);
	close(accepted[1]);
	unixfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (unixfd < 0 || connect(unixfd, (struct sockaddr *)&u, sizeof u) != 0)
		die("connect unix");
	await_accepts(accepted[0], 1);
	close(accepted[0]);

	// The UNIX listener that never accepts.
	struct sockaddr_un ub = {.sun_family = AF_UNIX};
	snprintf(ub.sun_path, sizeof ub.sun_path, "%s.backlog", argv[1]);
	int ubl = socket(AF_UNIX, SOCK_STREAM, 0);
	unlink(ub.sun_path);
	if (ubl < 0 || bind(ubl, (struct sockaddr *)&ub, sizeof ub) != 0 || listen(ubl, 4) != 0)
		die("listen unix backlog");
	pid_t unixbacklog = child("unixbacklog", ubl, -1);
	if (unixbacklog == 0)
		for (;;)
			pause();
	close(ubl);
	unixbacklogfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (unixbacklogfd < 0 || connect(unixbacklogfd, (struct sockaddr *)&ub, sizeof ub) != 0)
		die("connect unix backlog");

	// The epoll set: the second TCP connection, a UDP socket, a
	// socketpair's end.
	udpfd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in ua = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (udpfd < 0 || bind(udpfd, (struct sockaddr *)&ua, sizeof ua) != 0)
		die("udp");
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0)
		die("socketpair");
	pairfd = sp[0];
	epfd = epoll_create1(0);
	int fds[] = {tcpfd2, udpfd, pairfd};
	for (int i = 0; i < 3; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0)
			die("epoll_ctl");
	}

	void *(*fns[N])(void *) = {tcp_recv, pipe_write, epoll_waiter, unix_recv, backlog_recv, unix_backlog_recv};
	for (int i = 0; i < N; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, fns[i], NULL) != 0)
			die("pthread_create");
	}
	for (int i = 0; i < N; i++)
		while (atomic_load(&tids[i]) == 0)
			usleep(1000);
	printf("ready tcp=%d pipe=%d epoll=%d unix=%d backlogtid=%d unixbacklogtid=%d server=%d logger=%d unixpeer=%d "
	       "backlog=%d unixbacklog=%d port=%d backlogport=%d\n",
	       tids[TCP], tids[PIPE], tids[EPOLL], tids[UNIX], tids[BACKLOG], tids[UNIXBACKLOG], server, logger, unixpeer,
	       backlog, unixbacklog, port, backlogport);
	fflush(stdout);
	for (;;)
		pause();
}
