// offcpu: threads that wait in known ways, for off-CPU profiling.
//
//   sleeper  sleeps in nanosleep() in sleep_forever(), for the whole run
//   piper    blocks in read() on a pipe nobody writes, in read_forever()
//   napper   (-n N of them) naps 1 ms at a time in nap_loop(): leaves the
//            CPU ~1000 times a second, so switch-out samples flow
//   spinner  (-s N of them) burns CPU in spin_loop()
//
// Each thread prints "<role> <tid>" when it starts; then "ready". Runs for
// -t SECONDS (default: until killed). Built with frame pointers.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t started;
static int pipefd[2];
static volatile unsigned long sink;

static void announce(const char *role) {
	pthread_setname_np(pthread_self(), role);
	pthread_mutex_lock(&out_mu);
	printf("%s %ld\n", role, (long)syscall(SYS_gettid));
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
	pthread_barrier_wait(&started);
}

__attribute__((noinline)) static void sleep_forever(void) {
	struct timespec ts = {.tv_sec = 1000000};
	for (;;)
		nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void read_forever(void) {
	char c;
	for (;;)
		if (read(pipefd[0], &c, 1) <= 0)
			pause();
}

__attribute__((noinline)) static void nap_loop(void) {
	struct timespec ts = {.tv_nsec = 1000000};
	for (;;)
		nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void spin_loop(void) {
	unsigned long x = 1;
	for (;;) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		sink = x;
	}
}

static void *sleeper(void *arg) { (void)arg; announce("sleeper"); sleep_forever(); return NULL; }
static void *piper(void *arg)   { (void)arg; announce("piper");   read_forever();  return NULL; }
static void *napper(void *arg)  { (void)arg; announce("napper");  nap_loop();      return NULL; }
static void *spinner(void *arg) { (void)arg; announce("spinner"); spin_loop();     return NULL; }

static void start(void *(*fn)(void *)) {
	pthread_t t;
	if (pthread_create(&t, NULL, fn, NULL) != 0) {
		perror("pthread_create");
		exit(1);
	}
}

int main(int argc, char **argv) {
	int nappers = 0, spinners = 0, seconds = 0, opt;
	while ((opt = getopt(argc, argv, "n:s:t:")) != -1) {
		switch (opt) {
		case 'n': nappers = atoi(optarg); break;
		case 's': spinners = atoi(optarg); break;
		case 't': seconds = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-n nappers] [-s spinners] [-t seconds]\n", argv[0]);
			return 2;
		}
	}
	if (pipe(pipefd) != 0) {
		perror("pipe");
		return 1;
	}
	pthread_barrier_init(&started, NULL, 3 + nappers + spinners);
	start(sleeper);
	start(piper);
	for (int i = 0; i < nappers; i++)
		start(napper);
	for (int i = 0; i < spinners; i++)
		start(spinner);
	pthread_barrier_wait(&started);
	// Let the blocked threads reach their system calls before "ready".
	usleep(20000);
	printf("ready\n");
	fflush(stdout);
	if (seconds > 0) {
		sleep(seconds);
		return 0;
	}
	for (;;)
		pause();
}
