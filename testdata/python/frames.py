# frames.py puts threads at known Python frames and writes, from inside,
# what Python itself says of them, for runtimes/cpython's tests to compare
# with what they read from the outside:
#
#   spinner   Spinner.run → … → spin_here, spinning in pure Python on one
#             line (so that its line is the same whenever it is seen);
#   reader    wait_read ← read_side, blocked in os.read on a pipe;
#   deep      recurse ×DEPTH ← deep_side, spinning at the bottom;
#   gen       a generator's frame, spinning inside it;
#   nonascii  functions named café and 函数 (latin-1 and UCS-2 names);
#   main      blocked in os.read on a pipe nobody writes.
#
#   python3 frames.py OUT.json [THREADS]   prints "ready <pid>" once OUT.json
#                                          is written; THREADS more spinners
#
# OUT.json maps each thread's native id to its frames, innermost first,
# as [qualified name (co_qualname on 3.11+, else co_name), file, line],
# read with sys._current_frames() while every thread is where it stays.
# The threads that write it and print "ready" exit then.
import json
import os
import sys
import threading

spinning = [True]
arrived = {}  # name → native id, once the thread is where it stays
lock = threading.Lock()


def native_id():
    return threading.get_native_id()


def arrive(name):
    with lock:
        arrived[name] = native_id()


def spin_here(name):
    arrive(name)
    n = 0
    while spinning[0]: n += 1  # noqa: E701 — one line: every instruction of the loop on it
    return n


class Spinner:
    def run(self, name):
        def inner():
            return spin_here(name)
        return inner()


def wait_read(fd):
    arrive("reader")
    return os.read(fd, 1)


def read_side(fd):
    return wait_read(fd)


def recurse(n, name):
    if n == 0:
        return spin_here(name)
    return recurse(n - 1, name) + 1


def gen_body(name):
    arrive(name)
    n = 0
    while spinning[0]: n += 1  # noqa: E701
    yield n


def gen_side(name):
    for v in gen_body(name):
        return v


def café(name):
    return 函数(name)


def 函数(name):
    return spin_here(name)


def code_name(code):
    return getattr(code, "co_qualname", code.co_name)


def frames_of(frame):
    out = []
    while frame is not None:
        out.append([code_name(frame.f_code), frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return out


def blocked_in_read(tid):
    # /proc/self/task/TID/syscall starts with the system call's number:
    # 0 is read on x86-64, 63 on arm64.
    try:
        with open("/proc/self/task/%d/syscall" % tid) as f:
            return f.read().split()[0] in ("0", "63")
    except OSError:
        return False


def dump(path, names, r):
    while True:
        with lock:
            here = dict(arrived)
        if len(here) == len(names) and blocked_in_read(here["reader"]) and blocked_in_read(here["main"]):
            break
        threading.Event().wait(0.005)
    by_ident = {t.ident: t for t in threading.enumerate()}
    out = {}
    for ident, frame in sys._current_frames().items():
        t = by_ident.get(ident)
        if t is None or t.name in ("dumper", "announcer"):
            continue
        out[str(t.native_id)] = {"name": t.name, "frames": frames_of(frame)}
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.rename(path + ".tmp", path)


def main():
    path = sys.argv[1]
    extra = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    r, w = os.pipe()
    depth = 40
    starts = [
        ("spinner", lambda: Spinner().run("spinner")),
        ("reader", lambda: read_side(r)),
        ("deep", lambda: recurse(depth, "deep")),
        ("gen", lambda: gen_side("gen")),
        ("nonascii", lambda: café("nonascii")),
    ]
    starts += [("spinner-%d" % i, (lambda n: lambda: spin_here(n))("spinner-%d" % i)) for i in range(extra)]
    threads = [threading.Thread(target=f, name=n, daemon=True) for n, f in starts]
    for t in threads:
        t.start()
    names = [n for n, _ in starts] + ["main"]
    dumper = threading.Thread(target=dump, args=(path, names, r), name="dumper")
    dumper.start()
    threading.Thread(target=announce, args=(dumper,), name="announcer", daemon=True).start()
    wait_main(os.pipe()[0])


def wait_main(fd):
    arrive("main")
    os.read(fd, 1)


def announce(dumper):
    dumper.join()
    print("ready", os.getpid(), flush=True)


if __name__ == "__main__":
    main()
