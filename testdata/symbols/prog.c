// prog.c: a target whose functions sit at lines it reports itself, for
// symbolize's tests. It prints return addresses taken inside its own
// functions (as a stack unwinder would find them) with the line of each
// call, the address of a libc function, then waits to be inspected.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

// where returns its caller's return address: a PC inside the caller, just
// after the call.
__attribute__((noinline)) void *where(void) {
	void *ra = __builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
	return ra;
}

__attribute__((noinline)) void *outer_function(int *line) {
	void *ra = where(); *line = __LINE__;
	return ra;
}

// inlined_helper is inlined into holds_inline at every optimization level.
static inline __attribute__((always_inline)) void *inlined_helper(int *line) {
	void *ra = where(); *line = __LINE__;
	return ra;
}

__attribute__((noinline)) void *holds_inline(int *line, int *call_line) {
	void *ra = inlined_helper(line); *call_line = __LINE__;
	return ra;
}

int main(void) {
	int l1, l2, l3;
	void *ra1 = outer_function(&l1);
	void *ra2 = holds_inline(&l2, &l3);
	printf("ret outer_function %p %s %d\n", ra1, __FILE__, l1);
	printf("inl %p inlined_helper %d holds_inline %d\n", ra2, l2, l3);
	printf("func outer_function %p\n", (void *)outer_function);
	// Through the GOT in a PIE: libc's own address of write, not a PLT stub.
	void *(*volatile w)(void) = (void *(*)(void))write;
	printf("libc write %p\n", (void *)w);
	// Anonymous executable memory, where a JIT would put code.
	void *anon = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("anon %p\n", anon);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
