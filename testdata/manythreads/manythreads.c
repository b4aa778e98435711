// manythreads: starts N threads (argv[1], default 1000) that sleep in a
// named function, then S threads named "spinner" (argv[2], default 0)
// that spin in spin_forever — the newest threads, so that a rule choosing
// threads by id would not choose them — then prints "ready N" and sleeps
// in the main thread. Stacks are 64 KiB: thousands of threads fit.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_int started;
static volatile unsigned long spins;

__attribute__((noinline)) void idle_forever(void) {
	for (;;)
		sleep(1000);
}

__attribute__((noinline)) void spin_forever(void) {
	for (;;)
		spins++;
}

void *idler(void *arg) {
	atomic_fetch_add(&started, 1);
	idle_forever();
	return arg;
}

void *spinner(void *arg) {
	pthread_setname_np(pthread_self(), "spinner");
	atomic_fetch_add(&started, 1);
	spin_forever();
	return arg;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	int s = argc > 2 ? atoi(argv[2]) : 0;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (int i = 0; i < n + s; i++) {
		pthread_t t;
		if (pthread_create(&t, &attr, i < n ? idler : spinner, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	while (atomic_load(&started) < n + s)
		usleep(1000);
	printf("ready %d\n", n + s);
	fflush(stdout);
	for (;;)
		pause();
}
