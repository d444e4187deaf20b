package io.racaffinity.jdbc;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.sql.Connection;
import java.util.Arrays;
import java.util.function.LongUnaryOperator;

/**
 * What fast connection failover's slot costs a borrow + close by itself, without a pool or a
 * server: {@link NodeFailover#waiting} + {@link NodeFailover#done} + {@link NodeFailover#returned}
 * in a loop, beside the two compare-and-sets and the release store it is made of (on one static
 * field) and the claim + free alone; 11 interleaved rounds of 2,000,000, thread CPU time,
 * median ns/op with min-max.
 *
 * <pre>
 * java -cp java/target/racaffinity-0.2.0-benchmarks.jar io.racaffinity.jdbc.NodeFailoverTiming
 * </pre>
 */
public final class NodeFailoverTiming {
    private static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    private static final VarHandle CELL;
    private static volatile Object cell;
    private static volatile long sink;

    static {
        try {
            CELL = MethodHandles.lookup().findStaticVarHandle(NodeFailoverTiming.class, "cell", Object.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private NodeFailoverTiming() {}

    public static void main(String[] args) {
        NodeFailover f = new NodeFailover(3);
        Connection c = (Connection) java.lang.reflect.Proxy.newProxyInstance(NodeFailoverTiming.class.getClassLoader(),
                new Class<?>[] {Connection.class}, (p, m, a) -> null);
        String[] names = {"waiting + done + returned (a borrow + close's slot)", "waiting + returned (no hand-off)",
            "two compare-and-sets + a release store on a static field", "one compare-and-set + a release store",
            "empty loop"};
        LongUnaryOperator[] loops = {n -> {
            long acc = 0;
            for (long i = 0; i < n; i++) {
                int s = f.waiting(1);
                f.done(1, s, c);
                f.returned(1, s);
                acc += s;
            }
            return acc;
        }, n -> {
            long acc = 0;
            for (long i = 0; i < n; i++) {
                int s = f.waiting(1);
                f.returned(1, s);
                acc += s;
            }
            return acc;
        }, n -> {
            Thread me = Thread.currentThread();
            for (long i = 0; i < n; i++) {
                CELL.compareAndSet((Object) null, (Object) me);
                CELL.compareAndSet((Object) me, (Object) c);
                CELL.setRelease((Object) null);
            }
            return n;
        }, n -> {
            Thread me = Thread.currentThread();
            for (long i = 0; i < n; i++) {
                CELL.compareAndSet((Object) null, (Object) me);
                CELL.setRelease((Object) null);
            }
            return n;
        }, n -> {
            long acc = 0;
            for (long i = 0; i < n; i++) {
                acc += i;
            }
            return acc;
        }};
        long n = 2_000_000;
        for (int w = 0; w < 5; w++) {
            for (LongUnaryOperator l : loops) {
                sink += l.applyAsLong(n);
            }
        }
        int rounds = 11;
        double[][] t = new double[loops.length][rounds];
        for (int r = 0; r < rounds; r++) {
            for (int j = 0; j < loops.length; j++) {
                int k = r % 2 == 0 ? j : loops.length - 1 - j;
                long t0 = CPU.getCurrentThreadCpuTime();
                sink += loops[k].applyAsLong(n);
                t[k][r] = (double) (CPU.getCurrentThreadCpuTime() - t0) / n;
            }
        }
        System.out.printf("%nNodeFailover slot, %d interleaved rounds of %d; JDK %s%n%n", rounds, n, Runtime.version());
        System.out.println("| subject | ns/op (median) | min | max |");
        System.out.println("|---|---:|---:|---:|");
        for (int k = 0; k < loops.length; k++) {
            double[] s = t[k].clone();
            Arrays.sort(s);
            System.out.printf("| %s | %.2f | %.2f | %.2f |%n", names[k], s[rounds / 2], s[0], s[rounds - 1]);
        }
    }
}
