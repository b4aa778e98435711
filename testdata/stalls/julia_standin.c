// julia_standin.c: a stand-in for a Julia process whose garbage collector
// waits for a thread that never reaches a safepoint. Julia is not on the
// test machine; this program's functions carry the names of Julia's
// runtime (src/gc.c, src/safepoint.c) so that stallwatch sees what it
// would see in a real one:
//   - the collecting thread: jl_gc_collect → _jl_gc_collect →
//     jl_gc_wait_for_the_world, which waits (here, yields) until every
//     thread has set its gc_state;
//   - threads that reached a safepoint: jl_set_gc_and_wait →
//     jl_safepoint_wait_gc, blocked on a condition variable;
//   - one thread in a loop compiled without a safepoint (JIT code in a real
//     Julia; here julia_busy_loop_123, named as Julia names compiled
//     methods), which never sets its gc_state.
// Build it with -fno-inline so that each name is a frame. Run it as
// "julia" (the test copies it so), as the real executable is named.
//
//   julia [WAITERS]    prints "ready <pid>"
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static pthread_mutex_t safepoint_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t safepoint_cond = PTHREAD_COND_INITIALIZER;
static volatile int jl_gc_running;
static volatile int stopped_threads;
static volatile unsigned long work;

__attribute__((noinline)) void jl_safepoint_wait_gc(void) {
	pthread_mutex_lock(&safepoint_lock);
	stopped_threads++;
	while (jl_gc_running)
		pthread_cond_wait(&safepoint_cond, &safepoint_lock);
	pthread_mutex_unlock(&safepoint_lock);
}

__attribute__((noinline)) void jl_set_gc_and_wait(void) { jl_safepoint_wait_gc(); }

__attribute__((noinline)) void jl_gc_wait_for_the_world(int want) {
	// every other thread must stop; the busy one never does
	while (stopped_threads < want)
		sched_yield();
}

__attribute__((noinline)) void _jl_gc_collect(int want) { jl_gc_wait_for_the_world(want); }

__attribute__((noinline)) void jl_gc_collect(int want) {
	jl_gc_running = 1;
	_jl_gc_collect(want);
	jl_gc_running = 0;
}

__attribute__((noinline)) void julia_busy_loop_123(void) {
	for (;;)
		work++;
}

static void *busy(void *arg) {
	(void)arg;
	prctl(PR_SET_NAME, "julia-busy");
	julia_busy_loop_123();
	return NULL;
}

static void *mutator(void *arg) {
	(void)arg;
	prctl(PR_SET_NAME, "julia-worker");
	while (!jl_gc_running)
		sched_yield();
	jl_set_gc_and_wait();
	return NULL;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 3;
	pthread_t t;
	pthread_create(&t, NULL, busy, NULL);
	for (int i = 0; i < n; i++)
		pthread_create(&t, NULL, mutator, NULL);
	printf("ready %d\n", getpid());
	fflush(stdout);
	// the world has n+1 other threads; the busy one never stops
	jl_gc_collect(n + 1);
	return 0;
}
