// nofp: a worker thread spends its time in a hot leaf function called
// through a known chain, leaf ← middle ← outer ← worker, in a program
// built -O2 without frame pointers (as distributions build): the kernel's
// frame-pointer walk cannot see past the leaf. Each function is kept out
// of line and does work after its call so that no call becomes a jump.
// It prints "ready <pid>" and runs until killed; "-depth N" adds N frames
// of recurse() between worker and outer (a deep stack), "-threads N" runs
// N workers.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;
static int depth, threads = 1;
// Workers spin only once all are created: with a thousand of them
// spinning, creating the rest would take minutes on a small machine.
static pthread_barrier_t started;

__attribute__((noinline)) static unsigned long leaf(unsigned long x) {
	unsigned long h = x;
	for (int i = 0; i < 4096; i++)
		h = h * 6364136223846793005UL + 1442695040888963407UL;
	return h;
}

__attribute__((noinline)) static unsigned long middle(unsigned long x) {
	unsigned long v = leaf(x + 1);
	sink += v;
	return v ^ x;
}

__attribute__((noinline)) static unsigned long outer(unsigned long x) {
	unsigned long v = middle(x * 3);
	sink += v;
	return v + 7;
}

__attribute__((noinline)) static unsigned long recurse(int n, unsigned long x) {
	if (n == 0)
		return outer(x);
	unsigned long v = recurse(n - 1, x + 1);
	sink += v;
	return v;
}

static void *worker(void *arg) {
	(void)arg;
	pthread_barrier_wait(&started);
	for (unsigned long i = 0;; i++)
		sink += recurse(depth, i);
	return 0;
}

int main(int argc, char **argv) {
	for (int i = 1; i + 1 < argc; i++) {
		if (strcmp(argv[i], "-depth") == 0)
			depth = atoi(argv[i + 1]);
		if (strcmp(argv[i], "-threads") == 0)
			threads = atoi(argv[i + 1]);
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_t t;
	pthread_barrier_init(&started, 0, threads + 1);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t, &attr, worker, 0) != 0)
			return 1;
	pthread_barrier_wait(&started);
	printf("ready %d\n", getpid());
	fflush(stdout);
	pthread_join(t, 0);
	return 0;
}
