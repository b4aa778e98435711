# many.py starts THREADS threads, each ten Python calls deep and blocked
# in threading.Event.wait, for the benchmark of snapshots of a large
# CPython process. SIGUSR1 makes it print every thread's Python stack
# (traceback.format_stack of sys._current_frames(), what a program's own
# dump handler does), then "end-of-dump", on standard output.
#
#   python3 many.py THREADS     prints "ready <pid>"
import os
import signal
import sys
import threading
import traceback


def leaf(ev):
    ev.wait()


def level(n, ev):
    if n == 0:
        return leaf(ev)
    return level(n - 1, ev)


def dump(sig, frame):
    out = []
    for tid, f in sys._current_frames().items():
        out.append("Thread %d:\n%s" % (tid, "".join(traceback.format_stack(f))))
    sys.stdout.write("\n".join(out) + "\nend-of-dump\n")
    sys.stdout.flush()


def main():
    signal.signal(signal.SIGUSR1, dump)
    ev = threading.Event()
    started = threading.Barrier(int(sys.argv[1]) + 1)

    def run():
        started.wait()
        level(10, ev)

    for _ in range(int(sys.argv[1])):
        threading.Thread(target=run, daemon=True).start()
    started.wait()
    print("ready", os.getpid(), flush=True)
    while True:
        ev.wait(3600)


main()
