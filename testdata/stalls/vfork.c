// vfork.c: a thread in uninterruptible sleep (D state) for as long as the
// test wants. The main thread vforks; the kernel keeps a vfork parent in
// wait_for_vfork_done (TASK_KILLABLE: 'D' in /proc) until the child execs
// or exits, and the child sleeps first. A second thread stays runnable so
// that the process has more than the one D thread.
//
//   vfork SECONDS    prints "ready <pid>" then "vforked <child pid>"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static void *idle(void *arg) {
	(void)arg;
	prctl(PR_SET_NAME, "idle");
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv) {
	unsigned secs = argc > 1 ? (unsigned)atoi(argv[1]) : 60;
	pthread_t t;
	pthread_create(&t, NULL, idle, NULL);
	printf("ready %d\n", getpid());
	fflush(stdout);
	pid_t child = vfork();
	if (child == 0) {
		// The child shares the parent's memory: it only sleeps and exits.
		sleep(secs);
		_exit(0);
	}
	printf("vforked %d\n", child);
	fflush(stdout);
	return 0;
}
