// affinity.c: CPU starvation. N threads spin, all bound to one CPU
// (sched_setaffinity), so each is runnable all the time and runs 1/N of
// it: the others wait in the run queue.
//
//   affinity [THREADS]    prints "ready <pid>" once they spin
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void crunch(void) {
	for (;;)
		sink++;
}

static void *worker(void *arg) {
	char name[16];
	snprintf(name, sizeof name, "crunch-%ld", (long)arg);
	prctl(PR_SET_NAME, name);
	crunch();
	return NULL;
}

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 3;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	// set on the main thread before creating the others: they inherit it
	if (sched_setaffinity(0, sizeof one, &one) != 0) {
		perror("sched_setaffinity");
		return 1;
	}
	pthread_t t;
	for (long i = 0; i < n; i++)
		pthread_create(&t, NULL, worker, (void *)i);
	printf("ready %d\n", getpid());
	fflush(stdout);
	for (;;)
		pause();
}
