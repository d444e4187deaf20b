package io.racaffinity;

import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.bench.DataSourceBench;
import io.racaffinity.jdbc.AffinityDataSource;
import java.lang.management.ManagementFactory;
import java.lang.ref.Reference;
import java.lang.management.ThreadMXBean;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.LongUnaryOperator;

/**
 * Ratios against the no-op JNI call measured in the same process, round by
 * round: each round times every subject once (odd rounds in reverse order),
 * in thread CPU time, so load from other processes on a shared machine hits
 * subject and baseline alike. JMH runs its benchmarks one after another,
 * which on this machine moved a ratio by 2x between runs.
 *
 * <p>Run: {@code java -cp racaffinity-0.2.0-benchmarks.jar io.racaffinity.InterleavedBench [rounds]}, and
 * with {@code [rounds] --datasource} for {@code AffinityDataSource} against bare HikariCP over the local nodes,
 * with {@code [rounds] --unpinned} for an unpinned {@code pick()} + {@code release(OK)}, with
 * {@code [rounds] --xid} for what an XA call pays to key its Xid ({@code XidKey.of}), with
 * {@code [rounds] --replay} for request replay's recording cost on a {@code SELECT 1} request.
 * Prints a table and {@code JBENCH_PAIR <name> <ns> <baseline ns> <ratio median> <min> <max>} lines.
 */
public final class InterleavedBench {
    private static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();
    private static final long ROUND_NS = 4_000_000;
    private static volatile long sink;
    /** Where a subject keeps a lease, so that it escapes (as in a connection wrapper). */
    private static volatile Lease kept;

    /** A timed loop; its ratio is taken against subject {@code base} of the same rounds. */
    private record Subject(String name, String what, LongUnaryOperator loop, int base) {
        Subject(String name, String what, LongUnaryOperator loop) {
            this(name, what, loop, 0);
        }
    }

    /** Thrown out of a loop as unchecked: a JDBC failure ends the run. */
    private interface SqlLoop {
        long run(long n) throws SQLException;
    }

    private static LongUnaryOperator sql(SqlLoop l) {
        return n -> {
            try {
                return l.run(n);
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        };
    }

    private InterleavedBench() {}

    public static void main(String[] args) throws SQLException {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 21;
        // The DataSource pair runs in a JVM of its own (`--datasource`): its calls into
        // Cluster.pick() from a second site change what the JIT inlines into the others'
        // loops. It needs the local nodes (java/run_bench.sh exports their URLs).
        boolean nodes = args.length > 1 && args[1].equals("--datasource");
        if (args.length > 1 && args[1].equals("--replay")) {
            replay(rounds);
            return;
        }
        // `--unpinned`: unpinned pick() + release(OK) against the two raw crossings it replaced, in a JVM of its own.
        boolean unpinned = args.length > 1 && args[1].equals("--unpinned");
        // `--xid`: what an XA call pays to key its Xid (XidKey.of: one JNI call since 37fc80a), in a JVM of its own.
        boolean xid = args.length > 1 && args[1].equals("--xid");
        if (nodes && System.getenv("RACAFF_NODE1_URL") == null) {
            throw new IllegalStateException("--datasource needs RACAFF_NODE1_URL..3 (tests/cluster/pgnodes env)");
        }
        // JMH's DataSourceBench set-up: the node pools and an AffinityDataSource over them.
        DataSourceBench.Pools ds = null;
        if (nodes) {
            ds = new DataSourceBench.Pools();
            ds.setUp();
        }
        AffinityDataSource affinity = ds == null ? null : ds.affinity;
        try (Cluster cluster = Cluster.fromConfig("name = bench; nodes = RAC1, RAC2, RAC3");
                Pin pin = cluster.pin();
                Pin dsPin = affinity == null ? null : affinity.pin()) {
            long h = cluster.handle();
            long context = Native.contextNew(h);
            Native.contextPin(h, context);
            Route pinned = cluster.route();
            ThreadLocal<Route[]> floorRoute = ThreadLocal.withInitial(() -> new Route[] {pinned});
            Subject[] subjects = {
                new Subject("noop", "no-op JNI call `Native.noop`", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        acc += Native.noop(h, i);
                    }
                    return acc;
                }),
                // What the reachabilityFence(this) in a finally around each of Cluster's
                // crossings costs: the same no-op call fenced (bfdc2ff put it on 37 methods).
                new Subject("fencedNoop", "no-op JNI call with `Reference.reachabilityFence` in a `finally`", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try {
                            acc += Native.noop(h, i);
                        } finally {
                            Reference.reachabilityFence(cluster);
                        }
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
                // The least a per-thread cached route can do: find this thread's
                // entry and return its route, with no epoch check and no hit count.
                new Subject("routeFloor", "the floor: this thread's route from a `ThreadLocal`, no check, no count",
                        n -> {
                            long acc = 0;
                            for (long i = 0; i < n; i++) {
                                acc += floorRoute.get()[0].node();
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
            if (xid) {
                subjects = xidSubjects(subjects[0]);
            } else if (unpinned) {
                // Only the noop baseline and the unpinned pair: another call site of
                // Cluster.pick() in this JVM would change what the JIT inlines into the pinned loops.
                List<Subject> all = new ArrayList<>(List.of(subjects[0]));
                Cluster free = Cluster.fromConfig("name = bench-unpinned; nodes = RAC1, RAC2, RAC3");
                long freeContext = Native.contextNew(free.handle());
                all.add(new Subject("unpinnedPickRelease", "`pick()` + `release(OK)`, unpinned (one JNI call)", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        Lease l = free.pick();
                        l.release(Outcome.OK);
                        acc += l.node();
                    }
                    return acc;
                }));
                all.add(new Subject("nativeUnpinnedPick", "raw `Native.contextPick` + `Native.leaseEnd`, unpinned"
                        + " (the two crossings an unpinned pick + release took before)", n -> {
                    long acc = 0;
                    long fh = free.handle();
                    for (long i = 0; i < n; i++) {
                        long r = Native.contextPick(fh, freeContext);
                        Native.leaseEnd(fh, Native.node(r), Outcome.OK.ordinal());
                        acc += r;
                    }
                    return acc;
                }));
                subjects = all.toArray(new Subject[0]);
            } else if (!nodes) {
                List<Subject> all = new ArrayList<>(Arrays.asList(subjects));
                all.add(new Subject("pinnedPickReleaseKept",
                        "`pick()` + `release(OK)` on a pinned thread, the lease kept in a field", n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        Lease l = cluster.pick();
                        kept = l;
                        l.release(Outcome.OK);
                        acc += l.node();
                    }
                    return acc;
                }));
                subjects = all.toArray(new Subject[0]);
            } else {
                // Only the noop baseline and the pair.
                subjects = new Subject[] {subjects[0]};
                AffinityDataSource ads = affinity;
                HikariDataSource bare = ds.pools.get(dsPin.nodeName());
                List<Subject> all = new ArrayList<>(Arrays.asList(subjects));
                int bareIndex = all.size();
                all.add(new Subject("bareHikari", "bare HikariCP `getConnection()` + `close()`", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = bare.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                })));
                all.add(new Subject("affinityDataSource",
                        "`AffinityDataSource.getConnection()` + `close()`, pinned, over the same HikariCP pool", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = ads.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                // The same data source with its failover bookkeeping off (a control, never shipped), on a
                // one-node cluster of the pinned node over the same pool: what the bookkeeping costs.
                AffinityDataSource noFcf = ds.withoutFailover(dsPin.nodeName());
                all.add(new Subject("affinityNoFailover", "`AffinityDataSource.getConnection()` + `close()`, pinned,"
                        + " fast connection failover bookkeeping off (control)", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = noFcf.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                // The control's twins, built as it is (one node over the same pool): with the bookkeeping
                // on, the pair differs in the bookkeeping alone; with it off too, the pair differs in
                // nothing, and its ratio is what this comparison can resolve.
                AffinityDataSource oneFcf = ds.oneNode(dsPin.nodeName(), true);
                all.add(new Subject("affinityOneNode", "`AffinityDataSource.getConnection()` + `close()`, pinned,"
                        + " built as the control, bookkeeping on", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = oneFcf.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                AffinityDataSource noFcf2 = ds.oneNode(dsPin.nodeName(), false);
                all.add(new Subject("affinityNoFailoverTwin", "`AffinityDataSource.getConnection()` + `close()`,"
                        + " pinned, the control's identical twin", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = noFcf2.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                // Oracle UCP over pgjdbc on the same node: the anchor a UCP user would keep. UCP needs
                // serverName/portNumber/databaseName besides the URL, and ojdbc11 on the class path.
                String url = System.getenv("RACAFF_NODE" + dsPin.nodeName().substring(3) + "_URL");
                java.util.regex.Matcher m = java.util.regex.Pattern.compile("jdbc:postgresql://([^:/]+):(\\d+)/([^?]+)")
                        .matcher(url);
                if (!m.lookingAt()) {
                    throw new IllegalStateException("not a pgjdbc URL: " + url);
                }
                oracle.ucp.jdbc.PoolDataSource ucp = ucpPool("org.postgresql.ds.PGSimpleDataSource", url, m, "ucp");
                oracle.ucp.jdbc.PoolDataSource ucpLocal = ucpPool(
                        "io.racaffinity.bench.LocalValidPgDataSource", url, m, "ucp-local-valid");
                all.add(new Subject("ucpPgjdbc", "Oracle UCP 23.26 over pgjdbc `getConnection()` + `close()`, as it"
                        + " ships (an `isValid()` round trip per borrow)", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = ucp.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                all.add(new Subject("ucpLocalValid", "Oracle UCP over pgjdbc, `isValid()` answered locally (UCP's own"
                        + " pool work)", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = ucpLocal.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                AffinityDataSource unpinnedDs = ds.unpinned;
                all.add(new Subject("affinityUnpinned",
                        "`AffinityDataSource.getConnection()` + `close()`, unpinned (balanced over the three pools, each"
                                + " like the bare one)", sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Connection c = unpinnedDs.getConnection()) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                Cluster dsCluster = ads.getCluster();
                all.add(new Subject("wrapperFloor",
                        "the floor: the pinned route + a minimal wrapper over the same HikariCP borrow, no lease",
                        sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (Wrapped c = new Wrapped(bare.getConnection(), dsCluster.route())) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                all.add(new Subject("leasedWrapperFloor",
                        "the floor with the lease: a pinned `pick()` (host lease) + a minimal wrapper that releases it OK"
                                + " on close, over the same HikariCP borrow",
                        sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (LeasedWrapped c = new LeasedWrapped(bare.getConnection(), dsCluster.pick())) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                Object slots = io.racaffinity.jdbc.PinnedBorrowParts.failover(3);
                all.add(new Subject("slotLeasedWrapperFloor",
                        "the floor with the lease and a failover slot taken and freed around the borrow",
                        sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (io.racaffinity.jdbc.PinnedBorrowParts.SlotWrapped c =
                                io.racaffinity.jdbc.PinnedBorrowParts.borrow(slots, dsCluster, bare)) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                Cluster unpinnedCluster = unpinnedDs.getCluster();
                all.add(new Subject("unpinnedLeasedWrapperFloor",
                        "the unpinned floor: an unpinned `pick()` (one JNI call, host lease) + a minimal wrapper that"
                                + " releases it OK on close, over the same HikariCP borrow",
                        sql(n -> {
                    long acc = 0;
                    for (long i = 0; i < n; i++) {
                        try (LeasedWrapped c = new LeasedWrapped(bare.getConnection(), unpinnedCluster.pick())) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                long unpinnedContext = Native.contextNew(unpinnedCluster.handle());
                all.add(new Subject("unpinnedTwoCallFloor",
                        "the unpinned floor as before [fast-paths-2]: `Native.contextPick` + a library lease (its"
                                + " cleaner) released by `Native.leaseEnd` on close, over the same HikariCP borrow",
                        sql(n -> {
                    long acc = 0;
                    long uh = unpinnedCluster.handle();
                    for (long i = 0; i < n; i++) {
                        long r = Native.contextPick(uh, unpinnedContext);
                        Lease l = new Lease(unpinnedCluster, Native.node(r), Native.kind(r));
                        try (LeasedWrapped c = new LeasedWrapped(bare.getConnection(), l)) {
                            acc += c.hashCode() & 1;
                        }
                    }
                    return acc;
                }), bareIndex));
                subjects = all.toArray(new Subject[0]);
            }
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
            System.out.println("| subject | ns/op (median) | baseline | / baseline: median | min | max |");
            System.out.println("|---|---:|---|---:|---:|---:|");
            for (int s = 0; s < subjects.length; s++) {
                int b = subjects[s].base();
                double[] ratio = new double[rounds];
                for (int r = 0; r < rounds; r++) {
                    ratio[r] = ns[s][r] / ns[b][r];
                }
                double med = median(ns[s]);
                double base = median(ns[b]);
                double[] sorted = ratio.clone();
                Arrays.sort(sorted);
                System.out.printf("| %s | %.2f | %s | %.2f× | %.2f× | %.2f× |%n", subjects[s].what(), med,
                        subjects[b].name(), sorted[rounds / 2], sorted[0], sorted[rounds - 1]);
                System.out.printf("JBENCH_PAIR %s %.3f %.3f %.4f %.4f %.4f%n", subjects[s].name(), med, base,
                        sorted[rounds / 2], sorted[0], sorted[rounds - 1]);
            }
            // What the failover bookkeeping costs, each subject against its twin without it in the same rounds.
            String[][] twins = {{"affinityDataSource", "affinityNoFailover"}, {"slotLeasedWrapperFloor",
                "leasedWrapperFloor"}, {"affinityOneNode", "affinityNoFailover"},
                {"affinityNoFailoverTwin", "affinityNoFailover"}};
            for (String[] t : twins) {
                int a = -1;
                int b = -1;
                for (int k = 0; k < subjects.length; k++) {
                    a = subjects[k].name().equals(t[0]) ? k : a;
                    b = subjects[k].name().equals(t[1]) ? k : b;
                }
                if (a < 0 || b < 0) {
                    continue;
                }
                double[] ratio = new double[rounds];
                double[] diff = new double[rounds];
                for (int r = 0; r < rounds; r++) {
                    ratio[r] = ns[a][r] / ns[b][r];
                    diff[r] = ns[a][r] - ns[b][r];
                }
                Arrays.sort(ratio);
                Arrays.sort(diff);
                System.out.printf("| %s / %s | %.2f ns more (%.2f to %.2f) | %.3f× | %.3f× | %.3f× |%n", t[0], t[1],
                        diff[rounds / 2], diff[0], diff[rounds - 1], ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
                System.out.printf("JBENCH_PAIR %s/%s %.3f %.3f %.4f %.4f %.4f%n", t[0], t[1], median(ns[a]),
                        median(ns[b]), ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
            }
        } finally {
            if (ds != null) {
                ds.tearDown();
            }
        }
    }

    /** A gtrid of Narayana's length (its XidImple: 36 bytes with a node name of a few characters). */
    private static final byte[] GTRID = new byte[36];
    private static final byte[] BQUAL = new byte[24];

    static {
        for (int i = 0; i < GTRID.length; i++) {
            GTRID[i] = (byte) (i * 7 + 1);
        }
        for (int i = 0; i < BQUAL.length; i++) {
            BQUAL[i] = (byte) (i * 3 + 2);
        }
    }

    /** An Xid as a TM hands it over: its getters return its own arrays (the key copies them). */
    private record BenchXid(int getFormatId, byte[] getGlobalTransactionId, byte[] getBranchQualifier)
            implements javax.transaction.xa.Xid {}

    /**
     * {@code --xid}: the no-op JNI call, the core's transaction key ({@code Cluster.xaTransactionKey}, the JNI
     * call), the whole {@code XidKey.of} an XA call makes, and the same key's bytes built in Java with no
     * crossing (a floor for scale: the key is the core's, built there so every language agrees).
     */
    private static Subject[] xidSubjects(Subject noop) {
        javax.transaction.xa.Xid x = new BenchXid(0x131277, GTRID, BQUAL);
        return new Subject[] {noop,
            new Subject("xaTransactionKey", "`Cluster.xaTransactionKey(formatId, gtrid)`, 36-byte gtrid (one JNI"
                    + " call)", n -> {
                long acc = 0;
                for (long i = 0; i < n; i++) {
                    acc += Cluster.xaTransactionKey(x.getFormatId(), x.getGlobalTransactionId()).length;
                }
                return acc;
            }),
            new Subject("xidKeyOf", "`XidKey.of(xid)`: what each XA resource call does to key its Xid", n -> {
                long acc = 0;
                for (long i = 0; i < n; i++) {
                    acc += io.racaffinity.xa.XidKeyParts.of(x).hashCode();
                }
                return acc;
            }),
            new Subject("xidKeyJavaFloor", "the same key bytes built in Java, no crossing (floor for scale)", n -> {
                long acc = 0;
                for (long i = 0; i < n; i++) {
                    byte[] g = x.getGlobalTransactionId();
                    byte[] key = java.nio.ByteBuffer.allocate(4 + g.length).putInt(x.getFormatId()).put(g).array();
                    acc += key.length + key[5];
                }
                return acc;
            }),
        };
    }

    /** Requests per round of {@code --replay}, as python/bench_continuity.py. */
    private static final int REPLAY_REQUESTS = 500;

    /**
     * {@code --replay}: request replay's recording cost ([continuity]), {@link DataSourceBench#request}
     * (a connection, auto-commit off, {@code SELECT 1} read, COMMIT, close) on node 1 through an
     * {@code AffinityDataSource} with replay on, against the same without replay, and against the
     * same without replay whose application reads the transaction id as replay did until 2026-12-04
     * ({@code pg_current_xact_id()}), and as it does now ({@code pg_current_xact_id_if_assigned()},
     * which assigns none to this read-only request). Round by round
     * in one thread, odd rounds in reverse; wall time (what a request pays: its round trips) and
     * this thread's CPU time (the client's own work). Needs RACAFF_NODE1_URL.
     */
    private static void replay(int rounds) throws SQLException {
        if (System.getenv("RACAFF_NODE1_URL") == null) {
            throw new IllegalStateException("--replay needs RACAFF_NODE1_URL (tests/cluster/pgnodes env)");
        }
        DataSourceBench.Replay r = new DataSourceBench.Replay();
        r.setUp();
        try {
            String[] names = {"replayOff", "replayOffXid", "replayOn", "replayOffXidIfAssigned"};
            javax.sql.DataSource[] sources = {r.off, r.off, r.on, r.off};
            int[] readXid = {0, 1, 0, 2};
            // Warm-up: the JIT, the pool, the server's plan caches.
            for (int w = 0; w < 4; w++) {
                for (int k = 0; k < names.length; k++) {
                    for (int i = 0; i < REPLAY_REQUESTS; i++) {
                        sink += DataSourceBench.request(sources[k], readXid[k]);
                    }
                }
            }
            double[][] wall = new double[names.length][rounds];
            double[][] cpu = new double[names.length][rounds];
            for (int round = 0; round < rounds; round++) {
                for (int j = 0; j < names.length; j++) {
                    int k = round % 2 == 0 ? j : names.length - 1 - j;
                    long w0 = System.nanoTime();
                    long c0 = CPU.getCurrentThreadCpuTime();
                    for (int i = 0; i < REPLAY_REQUESTS; i++) {
                        sink += DataSourceBench.request(sources[k], readXid[k]);
                    }
                    cpu[k][round] = (double) (CPU.getCurrentThreadCpuTime() - c0) / REPLAY_REQUESTS;
                    wall[k][round] = (double) (System.nanoTime() - w0) / REPLAY_REQUESTS;
                }
            }
            System.out.printf("%nJava request replay, a request = connection + auto-commit off + SELECT 1 + COMMIT"
                    + " + close on one node, %d per round, %d interleaved rounds; JDK %s%n%n", REPLAY_REQUESTS,
                    rounds, Runtime.version());
            System.out.println("| subject | clock | ns/request (median) | baseline | / baseline: median | min | max |");
            System.out.println("|---|---|---:|---|---:|---:|---:|");
            // replay on against both baselines, and the xid read's own cost
            // (the fourth: the xid read's round trip without the xid it assigns); the last is the
            // recording alone since replay reads pg_current_xact_id_if_assigned()
            int[][] pairs = {{2, 0}, {2, 1}, {1, 0}, {3, 0}, {2, 3}};
            for (int[] p : pairs) {
                for (String clock : new String[] {"wall", "cpu"}) {
                    double[][] t = clock.equals("wall") ? wall : cpu;
                    double[] ratio = new double[rounds];
                    for (int i = 0; i < rounds; i++) {
                        ratio[i] = t[p[0]][i] / t[p[1]][i];
                    }
                    Arrays.sort(ratio);
                    System.out.printf("| %s | %s | %.0f | %s (%.0f) | %.3f× | %.3f× | %.3f× |%n", names[p[0]], clock,
                            median(t[p[0]]), names[p[1]], median(t[p[1]]), ratio[rounds / 2], ratio[0],
                            ratio[rounds - 1]);
                    System.out.printf("JBENCH_PAIR %s/%s.%s %.3f %.3f %.4f %.4f %.4f%n", names[p[0]], names[p[1]],
                            clock, median(t[p[0]]), median(t[p[1]]), ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
                }
            }
        } finally {
            r.tearDown();
        }
    }

    /** A UCP pool of 4 connections over pgjdbc, built by the factory class named. */
    private static oracle.ucp.jdbc.PoolDataSource ucpPool(String factory, String url, java.util.regex.Matcher m,
            String name) throws SQLException {
        oracle.ucp.jdbc.PoolDataSource p = oracle.ucp.jdbc.PoolDataSourceFactory.getPoolDataSource();
        p.setConnectionFactoryClassName(factory);
        p.setURL(url);
        p.setUser("postgres");
        p.setServerName(m.group(1));
        p.setPortNumber(Integer.parseInt(m.group(2)));
        p.setDatabaseName(m.group(3));
        p.setConnectionPoolName("bench-" + name);
        p.setInitialPoolSize(4);
        p.setMinPoolSize(4);
        p.setMaxPoolSize(4);
        return p;
    }

    /**
     * The least a routing data source's connection can be: the node pool's
     * connection and the route, closed through. What {@code AffinityDataSource}
     * adds beyond this is the lease (balancing and health).
     */
    private static final class Wrapped implements AutoCloseable {
        private final Connection physical;
        private final Route route;

        Wrapped(Connection physical, Route route) {
            this.physical = physical;
            this.route = route;
        }

        @Override
        public void close() throws SQLException {
            physical.close();
        }

        @Override
        public String toString() {
            return "Wrapped[" + route + "]";
        }
    }

    /**
     * {@link Wrapped} with the lease every routed connection needs (in-flight
     * count for balancing, the outcome for health): released OK on close.
     */
    private static final class LeasedWrapped implements AutoCloseable {
        private final Connection physical;
        private final Lease lease;

        LeasedWrapped(Connection physical, Lease lease) {
            this.physical = physical;
            this.lease = lease;
        }

        @Override
        public void close() throws SQLException {
            try {
                physical.close();
            } finally {
                lease.release(Outcome.OK);
            }
        }

        @Override
        public String toString() {
            return "LeasedWrapped[" + lease + "]";
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
