// GcLoop: a JVM that spends its time in full collections. It keeps a large
// live set (so that each full GC has much to mark) and calls System.gc()
// in a loop; each call is a VM operation (VM_G1CollectFull) run at a
// safepoint, while the other Java threads park in SafepointSynchronize.
//
//   java -Xmx768m GcLoop.java [MB]    prints "ready <pid>" once the live set is built
import java.util.ArrayList;
import java.util.List;

public class GcLoop {
    static volatile long sink;

    public static void main(String[] args) throws Exception {
        int mb = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        List<long[]> live = new ArrayList<>();
        for (int i = 0; i < mb * 16; i++) {
            live.add(new long[8192]); // 64 KiB each
        }
        for (int i = 0; i < 2; i++) {
            Thread t = new Thread(() -> {
                long x = 0;
                while (true) {
                    x += System.nanoTime() & 7; // a Java thread that must stop at each safepoint
                    sink = x;
                }
            }, "worker-" + i);
            t.setDaemon(true);
            t.start();
        }
        System.out.println("ready " + ProcessHandle.current().pid());
        System.out.flush();
        while (true) {
            System.gc();
            sink += live.size();
        }
    }
}
