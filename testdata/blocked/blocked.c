// blocked: threads that block in known places, each under two C functions
// of its own so that an unwinder must find them beneath libc:
//   sleeper   nanosleep            (sleep_outer → sleep_inner)
//   reader    read() on a pipe     (read_outer → read_inner)
//   holder    holds a mutex and a priority-inheritance mutex, then blocks
//             in read() on a socket (hold_outer → hold_inner)
//   locker    waits for the holder's mutex (lock_outer → lock_inner)
//   pi-waiter waits for the holder's PI mutex (pi_outer → pi_inner)
//   signaled  sleeps inside a signal handler (sig_outer → raise →
//             on_signal → handler_sleep)
// Prints "ready sleeper=T reader=T holder=T locker=T piwaiter=T
// signaled=T pipe=FD socket=FD" once all of them are on their way to
// blocking; the main thread then pauses.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SLEEPER, READER, HOLDER, LOCKER, PIWAITER, SIGNALED, N };
static atomic_int tids[N];
static atomic_int holding;
static int pipefd[2], sockfd[2];
static pthread_mutex_t plain = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pi;

static void set_tid(int i, const char *name) {
	pthread_setname_np(pthread_self(), name);
	atomic_store(&tids[i], (int)syscall(SYS_gettid));
}

__attribute__((noinline)) void sleep_inner(void) {
	struct timespec ts = {100000, 0};
	nanosleep(&ts, NULL);
}
__attribute__((noinline)) void sleep_outer(void) { sleep_inner(); __asm__ volatile(""); }

__attribute__((noinline)) void read_inner(int fd) {
	char c;
	if (read(fd, &c, 1) < 0)
		perror("read");
}
__attribute__((noinline)) void read_outer(int fd) { read_inner(fd); __asm__ volatile(""); }

__attribute__((noinline)) void hold_inner(void) {
	pthread_mutex_lock(&plain);
	pthread_mutex_lock(&pi);
	atomic_store(&holding, 1);
	read_outer(sockfd[0]);
}
__attribute__((noinline)) void hold_outer(void) { hold_inner(); __asm__ volatile(""); }

__attribute__((noinline)) void lock_inner(pthread_mutex_t *m) {
	pthread_mutex_lock(m);
	pthread_mutex_unlock(m);
}
__attribute__((noinline)) void lock_outer(void) { lock_inner(&plain); __asm__ volatile(""); }
__attribute__((noinline)) void pi_inner(void) { lock_inner(&pi); __asm__ volatile(""); }
__attribute__((noinline)) void pi_outer(void) { pi_inner(); __asm__ volatile(""); }

__attribute__((noinline)) void handler_sleep(void) { sleep_outer(); __asm__ volatile(""); }
void on_signal(int sig) {
	(void)sig;
	handler_sleep();
}
__attribute__((noinline)) void sig_outer(void) {
	pthread_kill(pthread_self(), SIGUSR1);
	__asm__ volatile("");
}

static void wait_holding(void) {
	while (!atomic_load(&holding))
		usleep(1000);
}

void *sleeper(void *a) { set_tid(SLEEPER, "sleeper"); sleep_outer(); return a; }
void *reader(void *a) { set_tid(READER, "reader"); read_outer(pipefd[0]); return a; }
void *holder(void *a) { set_tid(HOLDER, "holder"); hold_outer(); return a; }
void *locker(void *a) { wait_holding(); set_tid(LOCKER, "locker"); lock_outer(); return a; }
void *piwaiter(void *a) { wait_holding(); set_tid(PIWAITER, "pi-waiter"); pi_outer(); return a; }
void *signaled(void *a) { set_tid(SIGNALED, "signaled"); sig_outer(); return a; }

int main(void) {
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
	pthread_mutex_init(&pi, &ma);
	if (pipe(pipefd) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sockfd) != 0) {
		perror("pipe");
		return 1;
	}
	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGUSR1, &sa, NULL);
	void *(*fn[N])(void *) = {sleeper, reader, holder, locker, piwaiter, signaled};
	for (int i = 0; i < N; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, fn[i], NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < N; i++)
		while (atomic_load(&tids[i]) == 0)
			usleep(1000);
	printf("ready sleeper=%d reader=%d holder=%d locker=%d piwaiter=%d signaled=%d pipe=%d socket=%d\n",
	       tids[SLEEPER], tids[READER], tids[HOLDER], tids[LOCKER], tids[PIWAITER], tids[SIGNALED],
	       pipefd[0], sockfd[0]);
	fflush(stdout);
	for (;;)
		pause();
}
