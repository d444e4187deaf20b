package io.racaffinity.bench;

import io.racaffinity.jdbc.AffinityDataSource;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.util.LinkedHashMap;
import java.util.Map;
import javax.sql.DataSource;

/**
 * {@code AffinityDataSource}'s own per-borrow work, unpinned and pinned, without a pool: each node's
 * DataSource hands out one shared stub connection (a {@link Proxy}, the same cost in both), so what
 * differs between two builds is the data source's routing, lease and failover slot. Interleaved
 * rounds of 400,000 get + close in thread CPU time, median and min-max (ns per get + close).
 *
 * <p>Run: {@code java -cp racaffinity-0.2.0-benchmarks.jar io.racaffinity.bench.StubBorrowTiming [rounds]}.
 */
public final class StubBorrowTiming {
    static volatile long sink;
    public static void main(String[] a) throws Exception {
        Connection stub = (Connection) Proxy.newProxyInstance(StubBorrowTiming.class.getClassLoader(),
                new Class<?>[] {Connection.class}, (p, method, args) -> method.getName().equals("isClosed") ? Boolean.FALSE
                        : null);
        DataSource src = (DataSource) Proxy.newProxyInstance(StubBorrowTiming.class.getClassLoader(),
                new Class<?>[] {DataSource.class}, (p, method, args) -> method.getName().equals("getConnection") ? stub
                        : null);
        Map<String, DataSource> m = new LinkedHashMap<>();
        for (int i = 1; i <= 3; i++) {
            m.put("RAC" + i, src);
        }
        AffinityDataSource un = new AffinityDataSource();
        un.setConfig("name = stub-unpinned; nodes = RAC1, RAC2, RAC3");
        un.setNodeDataSources(m);
        un.setHeartbeatIntervalMillis(0);
        un.setRegisterMBean(false);
        un.init();
        AffinityDataSource pn = new AffinityDataSource();
        pn.setConfig("name = stub-pinned; nodes = RAC1, RAC2, RAC3");
        pn.setNodeDataSources(m);
        pn.setHeartbeatIntervalMillis(0);
        pn.setRegisterMBean(false);
        pn.init();
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        int rounds = a.length > 0 ? Integer.parseInt(a[0]) : 15;
        long n = 400_000;
        double[][] t = new double[2][rounds];
        try (var pin = pn.pin()) {
            for (int w = 0; w < 10; w++) {
                loop(un, n);
                loop(pn, n);
            }
            for (int r = 0; r < rounds; r++) {
                for (int k = 0; k < 2; k++) {
                    int s = r % 2 == 0 ? k : 1 - k;
                    long t0 = cpu.getCurrentThreadCpuTime();
                    loop(s == 0 ? un : pn, n);
                    t[s][r] = (cpu.getCurrentThreadCpuTime() - t0) / (double) n;
                }
            }
        }
        for (int k = 0; k < 2; k++) {
            double[] v = t[k].clone();
            java.util.Arrays.sort(v);
            System.out.printf("%s %.2f ns (%.2f-%.2f)%n", k == 0 ? "unpinned" : "pinned", v[rounds / 2], v[0], v[rounds - 1]);
        }
        System.exit(0);
    }
    static void loop(DataSource ds, long n) throws Exception {
        long acc = 0;
        for (long i = 0; i < n; i++) {
            try (Connection c = ds.getConnection()) {
                acc += c.hashCode() & 1;
            }
        }
        sink += acc;
    }
}
