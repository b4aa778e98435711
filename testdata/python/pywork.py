# pywork.py runs pure Python ten calls deep and reports its progress,
# "work <iterations> <process CPU ns>", every 100 ms, for the benchmarks
# that measure what sampling costs a CPython target. Prints "ready <pid>".
import os
import time


def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def level(d, n):
    if d == 0:
        return leaf(n)
    return level(d - 1, n)


def main():
    print("ready", os.getpid(), flush=True)
    it, next_report = 0, time.monotonic() + 0.1
    while True:
        level(10, 200)
        it += 1
        if it % 64 == 0 and time.monotonic() >= next_report:
            print("work", it, time.process_time_ns(), flush=True)
            next_report += 0.1


main()
