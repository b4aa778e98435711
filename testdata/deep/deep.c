// deep: a thread recurses 500 levels deep (descend, out of line, each
// level doing work after its call so that none becomes a jump) and blocks
// there in read(2) on a pipe nobody writes: a stack deeper than the 128
// frames a snapshot used to stop at. It prints "ready <tid>" once the
// thread blocks, and runs until killed. "-depth N" changes the depth;
// "-wide" has each level keep 512 bytes of its own on the stack (500
// levels: 256 KiB, more than a snapshot's stack copy holds).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int fds[2];
static int depth = 500;
static int wide;
static volatile long sink;

static long descend(int n);

__attribute__((noinline)) static long descend_wide(int n) {
	volatile char pad[512];
	pad[n % sizeof pad] = (char)n;
	long v = descend(n);
	return v + pad[n % sizeof pad];
}

__attribute__((noinline)) static long descend(int n) {
	if (n == 0) {
		printf("ready %ld\n", (long)syscall(SYS_gettid));
		fflush(stdout);
		char c;
		return read(fds[0], &c, 1);
	}
	long v = wide ? descend_wide(n - 1) : descend(n - 1);
	sink += v;
	return v + n;
}

static void *worker(void *arg) {
	(void)arg;
	sink += descend(depth);
	return 0;
}

int main(int argc, char **argv) {
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-depth") == 0)
			depth = atoi(argv[i + 1]);
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "-wide") == 0)
			wide = 1;
	if (pipe(fds) != 0)
		return 1;
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	pthread_join(t, 0);
	return 0;
}
