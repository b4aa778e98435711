// cppinline: a std::thread blocked in read(2) under C++ code that gcc -O2
// inlines: a member function of a class template and a function of a
// namespace, called from an out-of-line function, started through
// std::thread's invoker templates. Its frames are named by the DWARF of
// inlined calls and by demangled template names: the names gdb prints
// are the truth. It prints "ready <tid>" once the thread runs, then the
// thread waits on a pipe nobody writes.
#include <cstdio>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace app {

template <typename T>
struct Waiter {
	T fd;
	__attribute__((always_inline)) inline long wait() {
		char c;
		return ::read(fd, &c, 1);
	}
};

__attribute__((always_inline)) static inline long inl2(Waiter<int> &w) {
	return w.wait() + 1;
}

__attribute__((noinline)) long outer(Waiter<int> &w) {
	long r = inl2(w);
	asm volatile("" ::: "memory");
	return r * 2;
}

} // namespace app

static void run(app::Waiter<int> *w) {
	std::printf("ready %ld\n", (long)syscall(SYS_gettid));
	std::fflush(stdout);
	app::outer(*w);
}

int main() {
	int p[2];
	if (pipe(p) != 0)
		return 1;
	app::Waiter<int> w{p[0]};
	std::thread t(run, &w);
	t.join();
	return 0;
}
