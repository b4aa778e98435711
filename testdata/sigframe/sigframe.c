// sigframe: a thread interrupted by a signal at the very first
// instruction of a function, whose handler then spins: every sample is in
// the handler, and the frame under the signal frame is trap_at_entry at
// its first byte — an address that is no return address, directly after
// the last byte of before_trap. capture's TestSignalInterruptedFrame
// checks that the sampled stacks name trap_at_entry there, not
// before_trap (what naming the address before it would give).
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>

void trap_at_entry(void);
void before_trap(void);

// before_trap ends where trap_at_entry begins; trap_at_entry's first
// instruction traps (ud2). Both have call frame information: at entry,
// the return address is at the stack pointer.
__asm__(
	".text\n"
	".globl before_trap\n.type before_trap,@function\n"
	"before_trap:\n.cfi_startproc\n\tnop\n\tret\n.cfi_endproc\n.size before_trap, .-before_trap\n"
	".globl trap_at_entry\n.type trap_at_entry,@function\n"
	"trap_at_entry:\n.cfi_startproc\n\tud2\n\tret\n.cfi_endproc\n.size trap_at_entry, .-trap_at_entry\n");

static volatile unsigned long spins;

static void __attribute__((noinline)) spin_in_handler(int sig, siginfo_t *si, void *uc) {
	(void)sig, (void)si, (void)uc;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		spins++;
}

int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = spin_in_handler;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGILL, &sa, NULL);
	void (*volatile f)(void) = trap_at_entry;
	void (*volatile g)(void) = before_trap;
	g();
	f();
	return 0;
}
