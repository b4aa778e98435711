# churn.py changes its Python state as fast as it can, for readers that
# read it from the outside without stopping it: threads recurse up and
# down (frames pushed and popped all the time), and a thread starts and
# joins short-lived threads. Prints "ready <pid>" and runs until killed.
import os
import threading


def down(n):
    if n == 0:
        return 0
    return down(n - 1) + 1


def bounce():
    while True:
        for depth in (1, 30, 5, 60, 2):
            down(depth)


def brief():
    return down(3)


def spawn():
    while True:
        ts = [threading.Thread(target=brief) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def main():
    for _ in range(2):
        threading.Thread(target=bounce, daemon=True).start()
    threading.Thread(target=spawn, daemon=True).start()
    print("ready", os.getpid(), flush=True)
    bounce()


main()
