# Writes the fdinfo and socket table files of this directory: descriptors
# of each kind made here, their /proc/self/fdinfo files and the socket
# tables of this network namespace, as this machine's kernel prints them.
#   cd internal/fdtarget/testdata/host && python3 capture.py
import ctypes, os, select, signal, socket, tempfile

libc = ctypes.CDLL(None, use_errno=True)
class ts(ctypes.Structure): _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
class its(ctypes.Structure): _fields_ = [("i", ts), ("v", ts)]

efd = os.eventfd(5, os.EFD_SEMAPHORE)
r, w = os.pipe()
s1, s2 = socket.socketpair()
ep = select.epoll()
ep.register(r, select.EPOLLIN)
ep.register(s1, select.EPOLLIN | select.EPOLLOUT)
ep.register(efd, select.EPOLLIN)
tfd = libc.timerfd_create(1, 0)
libc.timerfd_settime(tfd, 0, ctypes.byref(its(ts(1, 500000000), ts(30, 0))), None)
mask = (ctypes.c_ulong * 16)()
mask[0] = (1 << (signal.SIGUSR1 - 1)) | (1 << (signal.SIGTERM - 1))
sfd = libc.signalfd(-1, ctypes.byref(mask), 0)
f = open("/etc/passwd"); f.read(100)
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen()
c = socket.create_connection(ls.getsockname()); a, _ = ls.accept(); c.send(b"hello")
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.bind(("::1", 0))
path = os.path.join(tempfile.mkdtemp(), "a b.sock")
ul = socket.socket(socket.AF_UNIX); ul.bind(path); ul.listen()
ab = socket.socket(socket.AF_UNIX); ab.bind("\0stallwatch-abstract")

for name, fd in [("file", f.fileno()), ("eventfd", efd), ("epoll", ep.fileno()), ("timerfd", tfd),
                 ("signalfd", sfd), ("pipe-read", r), ("pipe-write", w), ("unix", s1.fileno()), ("tcp", c.fileno())]:
    with open("fdinfo-" + name, "w") as out:
        out.write(open("/proc/self/fdinfo/%d" % fd).read())
for t in ["tcp", "udp6", "unix"]:
    with open("net-" + t, "w") as out:
        out.write(open("/proc/self/net/" + t).read())
os.unlink(path); os.rmdir(os.path.dirname(path))
