// dotnet_standin.cpp: a stand-in for a .NET (CoreCLR) process whose
// runtime suspension for a GC waits for a thread that does not reach a GC
// safe point. .NET is not on the test machine; this program's functions
// carry the names of CoreCLR's (src/coreclr/vm/threadsuspend.cpp,
// threads.cpp) so that stallwatch sees what it would see in a real one:
//   - the thread that collects: WKS::GCHeap::GarbageCollect →
//     ThreadSuspend::SuspendEE → ThreadSuspend::SuspendRuntime, which
//     waits (here, yields) until every managed thread is suspended;
//   - threads that came back from native code during the GC:
//     Thread::RareDisablePreemptiveGC → WKS::GCHeap::WaitUntilGCComplete,
//     blocked on a condition variable;
//   - one thread in managed code the JIT emitted without GC polls (here
//     a function named as such code would be), never suspended.
// Build it with -fno-inline; run it as "dotnet" (the test copies it so).
//
//   dotnet [WAITERS]    prints "ready <pid>"
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static pthread_mutex_t gc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gc_done = PTHREAD_COND_INITIALIZER;
static volatile int gc_in_progress;
static volatile int suspended;
static volatile unsigned long work;

namespace WKS {
struct GCHeap {
	__attribute__((noinline)) static void WaitUntilGCComplete() {
		pthread_mutex_lock(&gc_lock);
		suspended++;
		while (gc_in_progress)
			pthread_cond_wait(&gc_done, &gc_lock);
		pthread_mutex_unlock(&gc_lock);
	}
	__attribute__((noinline)) static void GarbageCollect(int want);
};
} // namespace WKS

struct ThreadSuspend {
	__attribute__((noinline)) static void SuspendRuntime(int want) {
		while (suspended < want)
			sched_yield();
	}
	__attribute__((noinline)) static void SuspendEE(int want) { SuspendRuntime(want); }
};

struct Thread {
	__attribute__((noinline)) static void RareDisablePreemptiveGC() { WKS::GCHeap::WaitUntilGCComplete(); }
};

void WKS::GCHeap::GarbageCollect(int want) {
	gc_in_progress = 1;
	ThreadSuspend::SuspendEE(want);
	gc_in_progress = 0;
}

extern "C" __attribute__((noinline)) void Program_Spin_NoGCPoll() {
	for (;;)
		work++;
}

static void *busy(void *) {
	prctl(PR_SET_NAME, ".NET busy");
	Program_Spin_NoGCPoll();
	return nullptr;
}

static void *mutator(void *) {
	prctl(PR_SET_NAME, ".NET worker");
	while (!gc_in_progress)
		sched_yield();
	Thread::RareDisablePreemptiveGC();
	return nullptr;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 3;
	pthread_t t;
	pthread_create(&t, nullptr, busy, nullptr);
	for (int i = 0; i < n; i++)
		pthread_create(&t, nullptr, mutator, nullptr);
	printf("ready %d\n", getpid());
	fflush(stdout);
	WKS::GCHeap::GarbageCollect(n + 1);
	return 0;
}
