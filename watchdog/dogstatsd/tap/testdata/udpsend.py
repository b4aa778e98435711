"""udpsend: a DogStatsD sender for the tap's tests, in the shapes real
clients and attackers take.

    udpsend.py [--user NAME] --family 4|6 [--bind ADDR] [--port P]
               [--v6only] [--connect] --to ADDR --tap-port P
               --metric NAME [--container C] [--count N] [--interval S]
               [--fork N] [--per-datagram]

It binds (--bind, port --port or 0) and prints "ready PORT" with the
local port, then sends "NAME:1|c" (with "|c:C" when --container is given)
every --interval seconds, --count times (0: until killed), and prints
"done" when it has sent them. --user drops to that user before the socket
is made (an unprivileged attacker). --fork N makes N worker processes that
share the one socket (a prefork server) and send; the parent sits in
pause(), and sends one datagram through it at each SIGUSR1 (then prints
"sent"). --per-datagram opens a new socket for every datagram (bash's
/dev/udp, php-datadogstatsd's flush).
"""

import argparse
import ctypes
import os
import pwd
import signal
import socket
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--user")
    ap.add_argument("--family", choices=["4", "6"], default="4")
    ap.add_argument("--bind")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--v6only", action="store_true")
    ap.add_argument("--connect", action="store_true")
    ap.add_argument("--to", required=True)
    ap.add_argument("--tap-port", type=int, required=True)
    ap.add_argument("--metric", required=True)
    ap.add_argument("--container")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--fork", type=int, default=0)
    ap.add_argument("--per-datagram", action="store_true")
    a = ap.parse_args()

    if a.user:
        pw = pwd.getpwnam(a.user)
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    fam = socket.AF_INET if a.family == "4" else socket.AF_INET6
    line = "%s:1|c" % a.metric
    if a.container:
        line += "|c:" + a.container
    data = line.encode()
    dest = (a.to, a.tap_port)

    def make():
        s = socket.socket(fam, socket.SOCK_DGRAM)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if a.v6only else 0)
        if a.bind is not None or a.port:
            s.bind((a.bind or ("0.0.0.0" if fam == socket.AF_INET else "::"), a.port))
        if a.connect:
            s.connect(dest)
        return s

    def send(s):
        try:
            if a.connect:
                s.send(data)
            else:
                s.sendto(data, dest)
        except OSError:
            pass  # ICMP port unreachable from a port nobody listens on

    def loop(s):
        n = 0
        while a.count == 0 or n < a.count:
            if a.per_datagram:
                s = make()
                send(s)
                s.close()
            else:
                send(s)
            n += 1
            time.sleep(a.interval)

    if a.per_datagram:
        print("ready 0", flush=True)
        loop(None)
        print("done", flush=True)
        return
    s = make()
    if not a.connect and s.getsockname()[1] == 0:
        send(s)  # an unbound socket gets its port at the first send
    print("ready %d" % s.getsockname()[1], flush=True)
    if a.fork:
        kids = []
        for _ in range(a.fork):
            pid = os.fork()
            if pid == 0:
                # A worker ends with its parent (PR_SET_PDEATHSIG), as
                # the test ends the parent.
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)
                loop(s)
                os._exit(0)
            kids.append(pid)
        print("workers " + " ".join(str(k) for k in kids), flush=True)

        def term(*_):
            for k in kids:
                os.kill(k, signal.SIGKILL)
            os._exit(0)

        def beat(*_):
            send(s)
            print("sent", flush=True)

        signal.signal(signal.SIGTERM, term)
        signal.signal(signal.SIGUSR1, beat)
        while True:
            signal.pause()
    loop(s)
    print("done", flush=True)
    # Stay, so that the test decides when the process ends.
    sys.stdin.read()


if __name__ == "__main__":
    main()
