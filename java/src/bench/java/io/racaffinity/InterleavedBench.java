package io.racaffinity;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;
import java.util.function.LongUnaryOperator;

/**
 * Ratios against the no-op JNI call measured in the same process, round by
 * round: each round times every subject once (odd rounds in reverse order),
 * in thread CPU time, so load from other processes on a shared machine hits
 * subject and baseline alike. JMH runs its benchmarks one after another,
 * which on this machine moved a ratio by 2x between runs.
 *
 * <p>Run: {@code java -cp racaffinity-0.1.0-benchmarks.jar io.racaffinity.InterleavedBench [rounds]}.
 * Prints a table and {@code JBENCH_PAIR <name> <ns> <baseline ns> <ratio median> <min> <max>} lines.
 */
public final class InterleavedBench {
    private static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    private static final long ROUND_NS = 4_000_000;
    private static volatile long sink;

    private record Subject(String name, String what, LongUnaryOperator loop) {}

    private InterleavedBench() {}

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 21;
        try (Cluster cluster = Cluster.fromConfig("name = bench; nodes = RAC1, RAC2, RAC3");
                Pin pin = cluster.pin()) {
            long h = cluster.handle();
            long context = Native.contextNew(h);
            Native.contextPin(h, context);
            Subject[] subjects = {
                new Subject("noop", "no-op JNI call `Native.noop`", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        acc += Native.noop(h, i);
                    }
                    return acc;
                }),
                new Subject("pinnedRoute", "`Cluster.route()` on a pinned thread (cached)", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        acc += cluster.route().node();
                    }
                    return acc;
                }),
                new Subject("nativePinnedRoute", "raw `Native.contextRoute` (always crosses)", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        acc += Native.contextRoute(h, context);
                    }
                    return acc;
                }),
                new Subject("pinnedPickRelease", "`pick()` + `release(OK)` on a pinned thread", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        Lease l = cluster.pick();
                        l.release(Outcome.OK);
                        acc += l.node();
                    }
                    return acc;
                }),
            };
            long[] iters = new long[subjects.length];
            for (int s = 0; s < subjects.length; s++) {
                iters[s] = calibrate(subjects[s]);
            }
            double[][] ns = new double[subjects.length][rounds];
            for (int r = 0; r < rounds; r++) {
                for (int k = 0; k < subjects.length; k++) {
                    int s = r % 2 == 0 ? k : subjects.length - 1 - k;
                    ns[s][r] = time(subjects[s], iters[s]);
                }
            }
            System.out.printf("%nJava, same process, %d interleaved rounds of ~%d ms each (thread CPU time); JDK %s%n%n",
                    rounds, ROUND_NS / 1_000_000, Runtime.version());
            System.out.println("| subject | ns/op (median) | / no-op JNI call: median | min | max |");
            System.out.println("|---|---:|---:|---:|---:|");
            for (int s = 0; s < subjects.length; s++) {
                double[] ratio = new double[rounds];
                for (int r = 0; r < rounds; r++) {
                    ratio[r] = ns[s][r] / ns[0][r];
                }
                double med = median(ns[s]);
                double base = median(ns[0]);
                double[] sorted = ratio.clone();
                Arrays.sort(sorted);
                System.out.printf("| %s | %.2f | %.2f× | %.2f× | %.2f× |%n", subjects[s].what(), med,
                        sorted[rounds / 2], sorted[0], sorted[rounds - 1]);
                System.out.printf("JBENCH_PAIR %s %.3f %.3f %.4f %.4f %.4f%n", subjects[s].name(), med, base,
                        sorted[rounds / 2], sorted[0], sorted[rounds - 1]);
            }
        }
    }

    private static long calibrate(Subject s) {
        long n = 1_000;
        // Warms the JIT up as well: the loop runs until one call takes a quarter round.
        while (true) {
            long t0 = CPU.getCurrentThreadCpuTime();
            sink += s.loop().applyAsLong(n);
            long dt = CPU.getCurrentThreadCpuTime() - t0;
            if (dt >= ROUND_NS / 4 && n >= 100_000) {
                return Math.max(1_000, (long) ((double) n * ROUND_NS / dt));
            }
            n *= 2;
        }
    }

    private static double time(Subject s, long n) {
        long t0 = CPU.getCurrentThreadCpuTime();
        sink += s.loop().applyAsLong(n);
        return (double) (CPU.getCurrentThreadCpuTime() - t0) / n;
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s[s.length / 2];
    }
}
