package io.racaffinity.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.util.Arrays;

/**
 * The cost of NodeConnect (issue 17) on the pool borrow it wraps: a HikariCP
 * getConnection()+close() on one node, directly, through NodeConnect.open (the privileged
 * block on the first call only) and through the privileged block on every call, interleaved
 * in one process, 15 rounds of 50,000 each; median ns/op with min-max, and the ratios.
 *
 * <pre>
 * mvn -q -f java -Pbench package -DskipTests
 * java -cp java/target/classes:java/target/test-classes:(HikariCP, pgjdbc, slf4j-nop jars) \
 *     io.racaffinity.jdbc.NodeConnectTiming jdbc:postgresql://127.0.0.1:PORT/postgres
 * </pre>
 */
public final class NodeConnectTiming {
    private NodeConnectTiming() {}

    public static void main(String[] args) throws Exception {
        int rounds = 15;
        int ops = 50_000;
        try (HikariDataSource ds = new HikariDataSource()) {
            ds.setJdbcUrl(args[0]);
            ds.setUsername("postgres");
            ds.setMaximumPoolSize(2);
            double[][] ns = new double[3][rounds];
            for (int mode = 0; mode < 3; mode++) {
                run(ds, ops, mode); // warm-up
            }
            for (int r = 0; r < rounds; r++) {
                for (int mode = 0; mode < 3; mode++) {
                    ns[mode][r] = run(ds, ops, mode);
                }
            }
            print("direct getConnection+close", ns[0]);
            print("NodeConnect.open+close", ns[1]);
            print("privileged every call", ns[2]);
            ratio("NodeConnect.open/direct", ns[1], ns[0]);
            ratio("privileged every call/direct", ns[2], ns[0]);
        }
    }

    private static void ratio(String what, double[] a, double[] b) {
        double[] ratio = new double[a.length];
        for (int r = 0; r < a.length; r++) {
            ratio[r] = a[r] / b[r];
        }
        Arrays.sort(ratio);
        System.out.printf("ratio %-30s median %.3f, min %.3f, max %.3f%n", what, ratio[ratio.length / 2], ratio[0],
                ratio[ratio.length - 1]);
    }

    @SuppressWarnings("removal")
    private static Connection everyCall(HikariDataSource ds) throws Exception {
        return java.security.AccessController.doPrivileged(
                (java.security.PrivilegedExceptionAction<Connection>) ds::getConnection);
    }

    private static double run(HikariDataSource ds, int ops, int mode) throws Exception {
        long t0 = System.nanoTime();
        for (int i = 0; i < ops; i++) {
            try (Connection c = mode == 0 ? ds.getConnection()
                    : mode == 1 ? NodeConnect.open(ds, i > 0, null, null) : everyCall(ds)) {
                if (c == null) {
                    throw new IllegalStateException();
                }
            }
        }
        return (System.nanoTime() - t0) / (double) ops;
    }

    private static void print(String what, double[] ns) {
        double[] s = ns.clone();
        Arrays.sort(s);
        System.out.printf("%-28s median %.0f ns/op, min %.0f, max %.0f (%d rounds)%n", what, s[s.length / 2], s[0],
                s[s.length - 1], s.length);
    }
}
