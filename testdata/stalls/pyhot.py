# A CPython process busy in three Python functions, called for the first
# time after start-up: with -X perf_jit their trampolines' jitdump records
# are the last ones written, still in CPython's buffer while it runs.
import sys


def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def middle(n):
    return leaf(n) + 1


def outer():
    while True:
        middle(10000)


print("ready", flush=True)
outer()
