// shortcopy: a worker thread spends its time in a hot leaf called from a
// function whose frame holds a 64 KiB buffer it has not used (as
// memcached's worker loop does): leaf ← buffered ← worker. The buffer's
// pages are not resident (dropped with MADV_DONTNEED once the frame is
// set up), so a perf sample's copy of the user stack stops at the first
// of them: the kernel copies without faulting pages in, and the sample's
// dyn_size says it copied less than it was asked. Built -O2 without frame
// pointers, so nothing but the copy can walk past the leaf's caller. It
// prints "ready <pid>" and runs until killed.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile unsigned long sink;
static pthread_barrier_t started;

__attribute__((noinline)) static unsigned long leaf(unsigned long x) {
	unsigned long h = x;
	for (int i = 0; i < 4096; i++)
		h = h * 6364136223846793005UL + 1442695040888963407UL;
	return h;
}

__attribute__((noinline)) static unsigned long buffered(unsigned long x) {
	char buf[64 << 10];
	// Touch the buffer's ends only (the compiler's stack probes touch
	// its pages too): then drop every whole page between them.
	buf[0] = (char)x;
	buf[sizeof buf - 1] = (char)x;
	uintptr_t lo = ((uintptr_t)buf + 4095) & ~(uintptr_t)4095;
	uintptr_t hi = ((uintptr_t)buf + sizeof buf) & ~(uintptr_t)4095;
	madvise((void *)lo, hi - lo, MADV_DONTNEED);
	unsigned long v = 0;
	for (;;) {
		v += leaf(x + v);
		sink += v + (unsigned long)buf[0] + (unsigned long)buf[sizeof buf - 1];
	}
	return v;
}

static void *worker(void *arg) {
	(void)arg;
	pthread_barrier_wait(&started);
	sink += buffered(1);
	return 0;
}

int main(void) {
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1 << 20);
	pthread_t t;
	pthread_barrier_init(&started, 0, 2);
	if (pthread_create(&t, &attr, worker, 0) != 0)
		return 1;
	pthread_barrier_wait(&started);
	printf("ready %d\n", getpid());
	fflush(stdout);
	pthread_join(t, 0);
	return 0;
}
