// reclaim: makes a memory cgroup with a limit below its working set
// reclaim, bounded in size. Two modes:
//
//   reclaim file PATH MB THREADS  maps PATH (made MB MiB large unless it
//                                 is already, synced, its pages dropped
//                                 from the page cache), then
//                                 THREADS threads named "toucher" read a
//                                 byte of every page over and over, each
//                                 in touch_pages: under a limit below MB
//                                 they fault pages in (major faults) and
//                                 reclaim the ones before them.
//   reclaim anon MB               touches MB MiB of anonymous memory,
//                                 once, in fill_anon, then sleeps: over
//                                 a limit without swap, the OOM killer.
//
// Prints "ready" when the threads are about to start, then "pass N"
// after each full pass of the first thread.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile unsigned char *map;
static size_t size;
static volatile unsigned long sink;

__attribute__((noinline)) static void touch_pages(int first) {
	for (unsigned long pass = 1;; pass++) {
		for (size_t off = 0; off < size; off += 4096)
			sink += map[off];
		if (first) {
			printf("pass %lu\n", pass);
			fflush(stdout);
		}
	}
}

static void *toucher(void *arg) {
	pthread_setname_np(pthread_self(), "toucher");
	touch_pages(arg != NULL);
	return NULL;
}

__attribute__((noinline)) static void fill_anon(size_t n) {
	unsigned char *p = malloc(n);
	if (p == NULL) {
		perror("malloc");
		exit(1);
	}
	for (size_t off = 0; off < n; off += 4096)
		p[off] = 1;
	sink += p[n / 2];
}

static int file_mode(const char *path, size_t mb, int threads) {
	size = mb << 20;
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		perror(path);
		return 1;
	}
	// Real blocks on disk, not a hole: a hole reads as zero pages
	// without I/O. (Writing them under a tight memory limit can
	// get the writer OOM-killed while its dirty pages wait for
	// writeback: a test makes the file outside the cgroup.)
	static char block[1 << 16];
	memset(block, 'x', sizeof block);
	for (size_t done = st.st_size; done < size; done += sizeof block)
		if (write(fd, block, sizeof block) != (ssize_t)sizeof block) {
			perror("write");
			return 1;
		}
	if (fsync(fd) != 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
		perror("fsync");
		return 1;
	}
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	// Read-ahead would hide the faults behind few large reads.
	madvise((void *)map, size, MADV_RANDOM);
	printf("ready\n");
	fflush(stdout);
	pthread_t t;
	for (int i = 1; i < threads; i++)
		pthread_create(&t, NULL, toucher, NULL);
	toucher("first");
	return 0;
}

int main(int argc, char **argv) {
	if (argc == 5 && strcmp(argv[1], "file") == 0)
		return file_mode(argv[2], strtoul(argv[3], NULL, 10), atoi(argv[4]));
	if (argc == 3 && strcmp(argv[1], "anon") == 0) {
		printf("ready\n");
		fflush(stdout);
		fill_anon(strtoul(argv[2], NULL, 10) << 20);
		printf("filled\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	fprintf(stderr, "usage: reclaim file PATH MB THREADS | reclaim anon MB\n");
	return 2;
}
