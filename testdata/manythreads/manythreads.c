// manythreads: starts N threads (argv[1], default 1000) that sleep in a
// named function, then prints "ready N" and sleeps in the main thread.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_int started;

__attribute__((noinline)) void idle_forever(void) {
	for (;;)
		sleep(1000);
}

void *idler(void *arg) {
	atomic_fetch_add(&started, 1);
	idle_forever();
	return arg;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (int i = 0; i < n; i++) {
		pthread_t t;
		if (pthread_create(&t, &attr, idler, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	while (atomic_load(&started) < n)
		usleep(1000);
	printf("ready %d\n", n);
	fflush(stdout);
	for (;;)
		pause();
}
