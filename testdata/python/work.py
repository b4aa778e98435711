# work.py spins in pure Python under a known chain of functions,
# hot_leaf ← middle ← outer ← main, so that profilers have named frames
# to find: the interpreter's own C frames in between (no frame pointers
# in Debian's python3) and, under -X perf / -X perf_jit, the trampolines
# CPython puts before each Python function. It prints "ready <pid>" and
# runs until killed; an argument N calls outer through N more levels of
# descend() (a deeper stack).
import os
import sys


def hot_leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def middle(n):
    return hot_leaf(n) + 1


def outer(n):
    return middle(n) * 2


def descend(n):
    if n == 0:
        return outer(20000)
    return descend(n - 1) + 1


def main():
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    print("ready", os.getpid(), flush=True)
    while True:
        descend(depth)


if __name__ == "__main__":
    sys.exit(main())
