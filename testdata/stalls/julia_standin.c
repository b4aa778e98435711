// julia_standin.c: a stand-in for a Julia process whose garbage collector
// waits for a thread that never reaches a safepoint. Julia is not on the
// test machine; this program's functions carry the names of Julia's
// runtime and wait as JuliaLang/julia's src/safepoint.c has them wait
// (docs/julia.md cites the sources), so that stallwatch sees what it
// would see in a real one:
//   - the collecting thread: jl_gc_collect → _jl_gc_collect →
//     jl_safepoint_start_gc (it sets jl_gc_running), then
//     jl_gc_wait_for_the_world, which sleeps on safepoint_cond_begin
//     until every other thread has set its gc_state (older releases spin
//     there in jl_cpu_pause instead);
//   - threads that reached a safepoint: jl_set_gc_and_wait sets the
//     thread's gc_state, wakes the collector and waits in
//     jl_safepoint_wait_gc on safepoint_cond_end while jl_gc_running;
//   - one thread in a loop compiled without a safepoint (JIT code in a real
//     Julia; here julia_busy_loop_123, named as Julia names compiled
//     methods), which never sets its gc_state.
// Build it with -fno-inline so that each name is a frame. Run it as
// "julia" (the test copies it so), as the real executable is named.
//
//   julia [WAITERS]    prints "ready <pid>"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_THREADS 64
#define JL_GC_STATE_WAITING 1

static pthread_mutex_t safepoint_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t safepoint_cond_begin = PTHREAD_COND_INITIALIZER;
static pthread_cond_t safepoint_cond_end = PTHREAD_COND_INITIALIZER;
static volatile int jl_gc_running;
static volatile int gc_state[MAX_THREADS]; // ptls->gc_state of each thread
static volatile unsigned long work;

__attribute__((noinline)) void jl_safepoint_wait_gc(void) {
	pthread_mutex_lock(&safepoint_lock);
	while (jl_gc_running)
		pthread_cond_wait(&safepoint_cond_end, &safepoint_lock);
	pthread_mutex_unlock(&safepoint_lock);
}

__attribute__((noinline)) void jl_set_gc_and_wait(int tid) {
	pthread_mutex_lock(&safepoint_lock);
	gc_state[tid] = JL_GC_STATE_WAITING;
	pthread_cond_broadcast(&safepoint_cond_begin);
	pthread_mutex_unlock(&safepoint_lock);
	jl_safepoint_wait_gc();
}

__attribute__((noinline)) int jl_safepoint_start_gc(void) {
	pthread_mutex_lock(&safepoint_lock);
	jl_gc_running = 1;
	pthread_mutex_unlock(&safepoint_lock);
	return 1;
}

__attribute__((noinline)) void jl_gc_wait_for_the_world(int nthreads) {
	// every other thread must set its gc_state; the busy one never does
	for (int i = 1; i < nthreads; i++) {
		pthread_mutex_lock(&safepoint_lock);
		while (!gc_state[i])
			pthread_cond_wait(&safepoint_cond_begin, &safepoint_lock);
		pthread_mutex_unlock(&safepoint_lock);
	}
}

__attribute__((noinline)) void _jl_gc_collect(int nthreads) {
	if (jl_safepoint_start_gc())
		jl_gc_wait_for_the_world(nthreads);
}

__attribute__((noinline)) void jl_gc_collect(int nthreads) {
	gc_state[0] = JL_GC_STATE_WAITING;
	_jl_gc_collect(nthreads);
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
	prctl(PR_SET_NAME, "julia-worker");
	while (!jl_gc_running)
		usleep(1000);
	jl_set_gc_and_wait((int)(long)arg);
	return NULL;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 3;
	if (n < 1 || n > MAX_THREADS - 2)
		n = 3;
	pthread_t t;
	// thread 0 collects, 1 is busy, 2..n+1 reach a safepoint
	pthread_create(&t, NULL, busy, NULL);
	for (int i = 0; i < n; i++)
		pthread_create(&t, NULL, mutator, (void *)(long)(i + 2));
	printf("ready %d\n", getpid());
	fflush(stdout);
	jl_gc_collect(n + 2);
	return 0;
}
