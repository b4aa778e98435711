// churn: threads start and end continuously.
//
// Every 1/-r seconds a new thread starts, prints "start <tid> <mono_ns>
// <spawn_ns>" (spawn_ns: when the main thread was about to create it),
// burns -s ms of its own CPU time in churn_spin(), sleeps -p ms, burns
// -s ms again, prints "end <tid>" and exits. At most -c live at once.
// "ready" comes first; runs for -t seconds (default: until killed).
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static int spin_ms = 10, pause_ms = 120, max_live = 64;
static volatile int live;
static volatile unsigned long sink;

static unsigned long long now_ns(clockid_t c) {
	struct timespec ts;
	clock_gettime(c, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void say(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&out_mu);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

__attribute__((noinline)) static void churn_spin(int ms) {
	unsigned long long until = now_ns(CLOCK_THREAD_CPUTIME_ID) + (unsigned long long)ms * 1000000ull;
	unsigned long x = 1;
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < until) {
		for (int i = 0; i < 1000; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		sink = x;
	}
}

static void *churn_thread(void *arg) {
	unsigned long long spawned = (unsigned long long)(uintptr_t)arg;
	long tid = (long)syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), "churn");
	say("start %ld %llu %llu\n", tid, now_ns(CLOCK_MONOTONIC), spawned);
	churn_spin(spin_ms);
	usleep(pause_ms * 1000);
	churn_spin(spin_ms);
	say("end %ld %llu\n", tid, now_ns(CLOCK_MONOTONIC));
	__atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv) {
	int rate = 20, seconds = 0, opt;
	while ((opt = getopt(argc, argv, "r:s:p:c:t:")) != -1) {
		switch (opt) {
		case 'r': rate = atoi(optarg); break;
		case 's': spin_ms = atoi(optarg); break;
		case 'p': pause_ms = atoi(optarg); break;
		case 'c': max_live = atoi(optarg); break;
		case 't': seconds = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-r threads/s] [-s spin ms] [-p pause ms] [-c max live] [-t seconds]\n", argv[0]);
			return 2;
		}
	}
	if (rate <= 0)
		rate = 1;
	printf("ready\n");
	fflush(stdout);
	unsigned long long stop = seconds > 0 ? now_ns(CLOCK_MONOTONIC) + (unsigned long long)seconds * 1000000000ull : 0;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	while (stop == 0 || now_ns(CLOCK_MONOTONIC) < stop) {
		if (__atomic_load_n(&live, __ATOMIC_SEQ_CST) < max_live) {
			pthread_t t;
			__atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
			void *spawned = (void *)(uintptr_t)now_ns(CLOCK_MONOTONIC);
			if (pthread_create(&t, &attr, churn_thread, spawned) != 0)
				__atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
		}
		usleep(1000000 / rate);
	}
	return 0;
}
