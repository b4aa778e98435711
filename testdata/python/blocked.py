# blocked.py blocks its only thread in os.read on a pipe nobody writes,
# under known Python functions, for the findings that must name the
# Python function that made the system call. Prints "ready <pid>".
import os


def wait_for_input(fd):
    return os.read(fd, 1)


def serve():
    r, _ = os.pipe()
    print("ready", os.getpid(), flush=True)
    return wait_for_input(r)


serve()
