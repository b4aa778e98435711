// manyfds: a process with N descriptors (argv[1], default 100000): N/2
// pipes, every one of their read ends in one epoll set. Thread "reader"
// blocks in read() on the first pipe (whose write end this process
// holds), thread "poller" in epoll_wait() on the set. Raises its soft
// RLIMIT_NOFILE to fit, up to the hard limit (which only CAP_SYS_RESOURCE
// raises): N is cut to what fits. With T (argv[2]), T more threads
// named "piper" block in read() on pipes of their own, one each. Prints
// "ready reader=TID poller=TID fds=N".
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static int first[2], epfd;
static atomic_int reader, poller;

static void *read_first(void *arg) {
	pthread_setname_np(pthread_self(), "reader");
	atomic_store(&reader, (int)syscall(SYS_gettid));
	char c;
	read(first[0], &c, 1);
	return arg;
}

static atomic_int pipers;

static void *read_own(void *arg) {
	pthread_setname_np(pthread_self(), "piper");
	int p[2];
	if (pipe(p) != 0) {
		perror("pipe");
		exit(1);
	}
	atomic_fetch_add(&pipers, 1);
	char c;
	read(p[0], &c, 1);
	return arg;
}

static void *wait_all(void *arg) {
	pthread_setname_np(pthread_self(), "poller");
	atomic_store(&poller, (int)syscall(SYS_gettid));
	struct epoll_event ev;
	epoll_wait(epfd, &ev, 1, -1);
	return arg;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 100000;
	int threads = argc > 2 ? atoi(argv[2]) : 0;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max < (rlim_t)n + 2 * threads + 64)
		n = (int)rl.rlim_max - 2 * threads - 64;
	rl.rlim_cur = n + 2 * threads + 64;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
		perror("setrlimit");
		return 1;
	}
	epfd = epoll_create1(0);
	if (pipe(first) != 0) {
		perror("pipe");
		return 1;
	}
	int fds = 3;
	for (int p[2] = {first[0], first[1]}; fds < n; fds += 2) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = p[0]};
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, p[0], &ev) != 0) {
			perror("epoll_ctl");
			return 1;
		}
		if (pipe(p) != 0) {
			perror("pipe");
			return 1;
		}
	}
	pthread_t t;
	pthread_create(&t, NULL, read_first, NULL);
	pthread_create(&t, NULL, wait_all, NULL);
	pthread_attr_t small;
	pthread_attr_init(&small);
	pthread_attr_setstacksize(&small, 64 * 1024);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t, &small, read_own, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	while (atomic_load(&reader) == 0 || atomic_load(&poller) == 0 || atomic_load(&pipers) < threads)
		usleep(1000);
	printf("ready reader=%d poller=%d fds=%d\n", reader, poller, fds);
	fflush(stdout);
	for (;;)
		pause();
}
