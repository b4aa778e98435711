// asleep: threads asleep in the system calls a frozen service sleeps in,
// each two named calls deep — a condition variable (futex), a mutex held
// by the main thread (futex), read() on a pipe nobody writes, nanosleep,
// epoll_wait on that pipe — and a SIGUSR1 handler that does nothing
// (SA_RESTART), so that a test can wake one thread and let it sleep
// again in the same call. Prints "ready cond=TID mutex=TID read=TID
// sleep=TID epoll=TID" once every thread is on its way to its call.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static int pipefd[2], epfd;
static pid_t tids[5];
static pthread_barrier_t started;

__attribute__((noinline)) void wait_cond(void) {
	pthread_mutex_lock(&cmu);
	for (;;)
		pthread_cond_wait(&never, &cmu);
}

__attribute__((noinline)) void wait_mutex(void) {
	for (;;)
		pthread_mutex_lock(&held);
}

__attribute__((noinline)) void wait_read(void) {
	char b[64];
	for (;;)
		if (read(pipefd[0], b, sizeof b) > 0)
			return;
}

__attribute__((noinline)) void wait_sleep(void) {
	struct timespec ts = {1000, 0};
	for (;;)
		nanosleep(&ts, NULL);
}

__attribute__((noinline)) void wait_epoll(void) {
	struct epoll_event ev;
	for (;;)
		epoll_wait(epfd, &ev, 1, -1);
}

static void (*const waits[5])(void) = {wait_cond, wait_mutex, wait_read, wait_sleep, wait_epoll};

__attribute__((noinline)) void *sleeper(void *arg) {
	long i = (long)arg;
	tids[i] = gettid();
	pthread_barrier_wait(&started);
	waits[i]();
	return NULL;
}

static void nothing(int sig) { (void)sig; }

int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = nothing;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	if (pipe(pipefd) != 0 || (epfd = epoll_create1(0)) < 0)
		return 1;
	struct epoll_event ev = {.events = EPOLLIN};
	epoll_ctl(epfd, EPOLL_CTL_ADD, pipefd[0], &ev);
	pthread_mutex_lock(&held);
	pthread_barrier_init(&started, NULL, 6);
	for (long i = 0; i < 5; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, sleeper, (void *)i) != 0)
			return 1;
	}
	pthread_barrier_wait(&started);
	printf("ready cond=%d mutex=%d read=%d sleep=%d epoll=%d\n", tids[0], tids[1], tids[2], tids[3], tids[4]);
	fflush(stdout);
	for (;;)
		pause();
}
