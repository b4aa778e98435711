// dlopen.c: loads the shared object named by argv[1], prints a return
// address inside it, and unloads it when told to (a line on stdin), so a
// symbolizer must name code whose mapping is gone.
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void *(*work)(void) = (void *(*)(void))dlsym(h, "plugin_work");
	printf("ret plugin_work %p\n", work());
	printf("ready\n");
	fflush(stdout);
	char line[64];
	if (fgets(line, sizeof line, stdin)) {
		dlclose(h);
		printf("closed\n");
		fflush(stdout);
	}
	for (;;)
		pause();
}
