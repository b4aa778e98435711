// Stall: JVMs stuck the ways users meet them, for the tests of the JVM's
// readers (runtimes/hotspot), the snapshot, the capture and its findings.
//
//   java -cp DIR Stall MODE [N]      (tests: testutil.StartJava)
//
// MODE is one of
//   deadlock      transfer-1 and transfer-2 deadlock on two synchronized
//                 accounts (Ledger.settleChecking / Ledger.settleSavings);
//                 heartbeat sleeps beside them
//   lockdeadlock  the same with java.util.concurrent ReentrantLocks
//   park          parked-1 waits in LockSupport.park
//   safepoint     spinner-1 runs a counted loop without safepoint polls
//                 (start the JVM with -XX:-UseCountedLoopSafepoints) while
//                 the main thread calls System.gc(): the VM holds a
//                 safepoint it cannot reach
//   threads N     N threads (worker-0 …) sleeping in Object.wait
//   spin          spinner-1 runs Spinner.spin, compiled, for ever; the
//                 VM stays responsive (its loops keep their polls)
//   reflect       the main thread sleeps in a method it called through
//                 reflection (native code between two runs of Java frames)
//
// It prints "ready <pid>" once the state is reached (the deadlocked threads
// are BLOCKED or WAITING, the parked thread is WAITING), then stays so.
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

class Ledger {
    final Object checking = new Object();
    final Object savings = new Object();
    final CountDownLatch bothHold = new CountDownLatch(2);
    long balance;

    void settleChecking() throws InterruptedException {
        synchronized (checking) {
            bothHold.countDown();
            bothHold.await();
            settleSavingsFrom();
        }
    }

    void settleSavingsFrom() {
        synchronized (savings) {
            balance++;
        }
    }

    void settleSavings() throws InterruptedException {
        synchronized (savings) {
            bothHold.countDown();
            bothHold.await();
            settleCheckingFrom();
        }
    }

    void settleCheckingFrom() {
        synchronized (checking) {
            balance--;
        }
    }
}

class Vault {
    final ReentrantLock gold = new ReentrantLock();
    final ReentrantLock silver = new ReentrantLock();
    final CountDownLatch bothHold = new CountDownLatch(2);

    void moveGold() throws InterruptedException {
        gold.lock();
        try {
            bothHold.countDown();
            bothHold.await();
            silver.lock();
            silver.unlock();
        } finally {
            gold.unlock();
        }
    }

    void moveSilver() throws InterruptedException {
        silver.lock();
        try {
            bothHold.countDown();
            bothHold.await();
            gold.lock();
            gold.unlock();
        } finally {
            silver.unlock();
        }
    }
}

class Spinner {
    static volatile long sink;

    // Two nested counted int loops: C2 removes their safepoint polls
    // under -XX:-UseCountedLoopSafepoints, so a thread in them does not
    // stop for n*n iterations (for ever, for a large n).
    static long spin(int n) {
        long x = 0;
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < n; i++) {
                x += (i ^ (x >>> 3)) & 7;
            }
        }
        return x;
    }
}

public class Stall {
    interface Body {
        void run() throws Exception;
    }

    static Thread start(String name, Body body) {
        Thread t = new Thread(() -> {
            try {
                body.run();
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    static void waitFor(Thread.State want, Thread... ts) throws InterruptedException {
        for (Thread t : ts) {
            while (t.getState() != want) {
                Thread.sleep(10);
            }
        }
    }

    static void ready() {
        System.out.println("ready " + ProcessHandle.current().pid());
        System.out.flush();
    }

    public static void heartbeat() throws InterruptedException {
        while (true) {
            Thread.sleep(1000);
        }
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "deadlock": {
                Ledger l = new Ledger();
                Thread a = start("transfer-1", l::settleChecking);
                Thread b = start("transfer-2", l::settleSavings);
                start("heartbeat", Stall::heartbeat);
                waitFor(Thread.State.BLOCKED, a, b);
                break;
            }
            case "lockdeadlock": {
                Vault v = new Vault();
                Thread a = start("mover-gold", v::moveGold);
                Thread b = start("mover-silver", v::moveSilver);
                waitFor(Thread.State.WAITING, a, b);
                break;
            }
            case "park": {
                Thread p = start("parked-1", () -> {
                    while (true) {
                        LockSupport.park(Stall.class);
                    }
                });
                waitFor(Thread.State.WAITING, p);
                break;
            }
            case "safepoint": {
                // Warm spin up so that C2 compiles it without polls, then
                // run it long enough to outlast any test.
                for (int i = 0; i < 2000; i++) {
                    Spinner.sink += Spinner.spin(300);
                }
                start("spinner-1", () -> {
                    while (true) {
                        Spinner.sink += Spinner.spin(Integer.MAX_VALUE);
                    }
                });
                // No Java thread prints once the safepoint holds: say
                // ready first (the test waits for the VM's own state).
                ready();
                start("gc-1", () -> {
                    while (true) {
                        System.gc();
                    }
                });
                Stall.heartbeat();
                break;
            }
            case "spin": {
                for (int i = 0; i < 2000; i++) {
                    Spinner.sink += Spinner.spin(300);
                }
                start("spinner-1", () -> {
                    while (true) {
                        Spinner.sink += Spinner.spin(30_000);
                    }
                });
                break;
            }
            case "threads": {
                int n = Integer.parseInt(args[1]);
                Object lock = new Object();
                List<Thread> ts = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    ts.add(start("worker-" + i, () -> {
                        synchronized (lock) {
                            while (true) {
                                lock.wait();
                            }
                        }
                    }));
                }
                waitFor(Thread.State.WAITING, ts.toArray(new Thread[0]));
                break;
            }
            case "reflect":
                ready();
                Stall.class.getMethod("heartbeat").invoke(null);
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + args[0]);
        }
        ready();
        Stall.heartbeat();
    }
}
