// plugin.c: a shared object that dlopen.c loads and unloads, for the test
// of code whose mapping went away before symbolization.
__attribute__((noinline)) void *plugin_where(void) {
	void *ra = __builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
	return ra;
}

__attribute__((noinline)) void *plugin_work(void) {
	return plugin_where();
}
