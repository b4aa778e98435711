// mainexit: main starts two threads and leaves through pthread_exit, as
// some servers do: the process lives on with a zombie main thread, whose
// own /proc/<pid>/maps is empty while /proc/<tid>/maps of a live thread is
// not. One thread spins in spin_in_worker, the other waits in
// wait_in_worker (pause). It prints "ready waiter=TID spinner=TID" once
// both run, then exits its main thread.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long sink;
static pthread_barrier_t started;
static long tids[2];

__attribute__((noinline)) static void spin_in_worker(void) {
	for (;;)
		sink++;
}

__attribute__((noinline)) static void wait_in_worker(void) {
	for (;;)
		pause();
}

static void *spinner(void *arg) {
	(void)arg;
	tids[1] = syscall(SYS_gettid);
	pthread_barrier_wait(&started);
	spin_in_worker();
	return 0;
}

static void *waiter(void *arg) {
	(void)arg;
	tids[0] = syscall(SYS_gettid);
	pthread_barrier_wait(&started);
	wait_in_worker();
	return 0;
}

int main(void) {
	pthread_t a, b;
	pthread_barrier_init(&started, 0, 3);
	pthread_create(&a, 0, waiter, 0);
	pthread_create(&b, 0, spinner, 0);
	pthread_barrier_wait(&started);
	printf("ready waiter=%ld spinner=%ld\n", tids[0], tids[1]);
	fflush(stdout);
	pthread_exit(0);
}
