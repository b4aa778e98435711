# gil.py: CPython threads contending for the global interpreter lock. Every
# thread runs pure Python arithmetic; only the one holding the GIL runs,
# the others wait in take_gil.
#
#   python3.12 -X perf gil.py [THREADS]    prints "ready <pid>"
import os
import sys
import threading


def crunch():
    x = 0
    while True:
        for i in range(1000):
            x = (x * 31 + i) % 1000003


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for _ in range(n):
        threading.Thread(target=crunch, daemon=True).start()
    print("ready", os.getpid(), flush=True)
    threading.Event().wait()


main()
