// prog.cpp: C++ names for symbolize's demangling test.
#include <cstdio>
#include <unistd.h>
#include <vector>

__attribute__((noinline)) void *where() {
	void *ra = __builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
	return ra;
}

namespace stall {

class Worker {
public:
	__attribute__((noinline)) void *spin(int n);
	template <typename T> __attribute__((noinline)) void *visit(const std::vector<T> &v);
};

void *Worker::spin(int n) {
	void *ra = where();
	__asm__ volatile("" : : "r"(n) : "memory");
	return ra;
}

template <typename T> void *Worker::visit(const std::vector<T> &v) {
	void *ra = where();
	__asm__ volatile("" : : "r"(v.size()) : "memory");
	return ra;
}

} // namespace stall

int main() {
	stall::Worker w;
	std::vector<long> v{1, 2, 3};
	void *a = w.spin(3);
	void *b = w.visit(v);
	std::printf("ret spin %p\n", a);
	std::printf("ret visit %p\n", b);
	std::printf("ready\n");
	std::fflush(stdout);
	for (;;)
		pause();
}
