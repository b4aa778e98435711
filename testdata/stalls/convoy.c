// convoy.c: a lock convoy. The "owner" thread takes a mutex and, holding
// it, sleeps in a slow call (as a thread that does I/O under a lock);
// "waiter-N" threads block on the same mutex behind it.
//
//   convoy [WAITERS]    prints "ready <pid>" once every waiter is queued
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t started_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static int held;

__attribute__((noinline)) static void slow_call_under_lock(void) {
	struct timespec ts = {3600, 0};
	nanosleep(&ts, NULL);
}

static void *owner(void *arg) {
	(void)arg;
	prctl(PR_SET_NAME, "owner");
	pthread_mutex_lock(&lock);
	pthread_mutex_lock(&started_mu);
	held = 1;
	pthread_cond_broadcast(&started_cv);
	pthread_mutex_unlock(&started_mu);
	slow_call_under_lock();
	pthread_mutex_unlock(&lock);
	return NULL;
}

__attribute__((noinline)) static void update_shared_state(void) {
	pthread_mutex_lock(&lock);
	pthread_mutex_unlock(&lock);
}

static void *waiter(void *arg) {
	char name[16];
	snprintf(name, sizeof name, "waiter-%ld", (long)arg);
	prctl(PR_SET_NAME, name);
	update_shared_state();
	return NULL;
}

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 4;
	pthread_t t;
	pthread_create(&t, NULL, owner, NULL);
	pthread_mutex_lock(&started_mu);
	while (!held)
		pthread_cond_wait(&started_cv, &started_mu);
	pthread_mutex_unlock(&started_mu);
	for (long i = 0; i < n; i++)
		pthread_create(&t, NULL, waiter, (void *)i);
	printf("ready %d\n", getpid());
	fflush(stdout);
	for (;;)
		pause();
}
