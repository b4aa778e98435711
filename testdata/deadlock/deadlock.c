// deadlock: two threads take two mutexes in opposite order and deadlock;
// a third waits for one of those mutexes; a fourth keeps a progress
// counter moving and prints it, so a test can tell the process still runs.
//
// Prints "ready a=TID b=TID waiter=TID progress=TID counter=ADDR" once
// every thread has started (ADDR, in decimal, is where the progress counter
// lives, for a test that reads it from /proc/PID/mem), then "progress N" every 100 ms. The main thread joins the
// first worker (and so waits forever).
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t all_hold;
static atomic_int tids[4];
static volatile unsigned long progress;

static void set_tid(int i, const char *name) {
	pthread_setname_np(pthread_self(), name);
	atomic_store(&tids[i], (int)syscall(SYS_gettid));
}

__attribute__((noinline)) void take_b_while_holding_a(void) {
	pthread_mutex_lock(&lock_b);
	pthread_mutex_unlock(&lock_b);
}

__attribute__((noinline)) void take_a_while_holding_b(void) {
	pthread_mutex_lock(&lock_a);
	pthread_mutex_unlock(&lock_a);
}

__attribute__((noinline)) void wait_for_a(void) {
	pthread_mutex_lock(&lock_a);
	pthread_mutex_unlock(&lock_a);
}

void *worker_a(void *arg) {
	set_tid(0, "worker-a");
	pthread_mutex_lock(&lock_a);
	pthread_barrier_wait(&all_hold);
	take_b_while_holding_a();
	pthread_mutex_unlock(&lock_a);
	return arg;
}

void *worker_b(void *arg) {
	set_tid(1, "worker-b");
	pthread_mutex_lock(&lock_b);
	pthread_barrier_wait(&all_hold);
	take_a_while_holding_b();
	pthread_mutex_unlock(&lock_b);
	return arg;
}

void *waiter(void *arg) {
	set_tid(2, "waiter");
	pthread_barrier_wait(&all_hold);
	// Give the workers time to block on each other first.
	usleep(50 * 1000);
	wait_for_a();
	return arg;
}

__attribute__((noinline)) void count_progress(void) {
	struct timespec tick = {0, 1000 * 1000};
	for (unsigned long n = 0;; n++) {
		progress++;
		if (n % 100 == 0) {
			printf("progress %lu\n", progress);
			fflush(stdout);
		}
		nanosleep(&tick, NULL);
	}
}

void *progress_loop(void *arg) {
	set_tid(3, "progress");
	count_progress();
	return arg;
}

int main(void) {
	pthread_t t[4];
	void *(*fn[4])(void *) = {worker_a, worker_b, waiter, progress_loop};
	pthread_barrier_init(&all_hold, NULL, 3);
	for (int i = 0; i < 4; i++) {
		if (pthread_create(&t[i], NULL, fn[i], NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < 4; i++) {
		while (atomic_load(&tids[i]) == 0)
			usleep(1000);
	}
	printf("ready a=%d b=%d waiter=%d progress=%d counter=%lu\n", tids[0], tids[1], tids[2], tids[3],
	       (unsigned long)&progress);
	fflush(stdout);
	pthread_join(t[0], NULL);
	return 0;
}
