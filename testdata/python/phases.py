# phases.py runs three pure-Python functions one after another, each for
# a known phase, and records when each phase began on CLOCK_MONOTONIC (the
# clock of perf samples), so that a test knows which function every
# sample should be attributed to.
#
#   python3 phases.py PHASE_MS ROUNDS OUT.json
#
# Prints "ready <pid>", waits for a line on standard input, runs ROUNDS
# rounds of alpha, beta, gamma, writes OUT.json — [[start_ns, name], …,
# [end_ns, "end"]] — and prints "done".
import json
import os
import sys
import time


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def alpha(deadline):
    x = 0
    while now() < deadline:
        for i in range(2000):
            x = (x * 31 + i) % 1000003
    return x


def beta(deadline):
    s = 0
    while now() < deadline:
        for i in range(2000):
            s += i & 7
    return s


def gamma(deadline):
    v = [0] * 64
    while now() < deadline:
        for i in range(2000):
            v[i & 63] ^= i
    return v


def main():
    phase_ns = int(sys.argv[1]) * 1000000
    rounds = int(sys.argv[2])
    print("ready", os.getpid(), flush=True)
    sys.stdin.readline()
    timeline = []
    for _ in range(rounds):
        for f in (alpha, beta, gamma):
            start = now()
            timeline.append([start, f.__name__])
            f(start + phase_ns)
    timeline.append([now(), "end"])
    with open(sys.argv[3], "w") as out:
        json.dump(timeline, out)
    print("done", flush=True)


main()
