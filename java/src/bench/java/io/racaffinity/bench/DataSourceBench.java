package io.racaffinity.bench;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.Pin;
import io.racaffinity.jdbc.AffinityDataSource;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * (b) {@code AffinityDataSource.getConnection()+close()} over HikariCP node pools
 * against bare HikariCP {@code getConnection()+close()} on the same node, in one
 * run: the bare benchmark uses the very pool the pinned affinity benchmark lands on.
 * Nodes: RACAFF_NODE{1,2,3}_URL (tests/cluster/pgnodes env), else 127.0.0.1:5543i.
 * The {@code *Select1} variants add one round trip ({@code SELECT 1}), the smallest
 * unit of real work.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class DataSourceBench {
    @State(Scope.Benchmark)
    public static class Pools {
        /** The node pools by node name (InterleavedBench uses them too). */
        public final Map<String, HikariDataSource> pools = new LinkedHashMap<>();
        public AffinityDataSource affinity;
        /** A second data source over the same pools, never pinned: balanced borrows. */
        public AffinityDataSource unpinned;

        @Setup(Level.Trial)
        public void setUp() throws SQLException {
            for (int i = 1; i <= 3; i++) {
                String url = System.getenv("RACAFF_NODE" + i + "_URL");
                HikariConfig c = new HikariConfig();
                c.setJdbcUrl(url != null ? url : "jdbc:postgresql://127.0.0.1:" + (55430 + i) + "/postgres");
                c.setUsername("postgres");
                // The benchmarks jar merges ojdbc11 (for the UCP anchor), whose java.sql.Driver service
                // file replaces pgjdbc's: name the driver.
                c.setDriverClassName("org.postgresql.Driver");
                c.setMaximumPoolSize(4);
                c.setMinimumIdle(4);
                c.setPoolName("bench-RAC" + i);
                pools.put("RAC" + i, new HikariDataSource(c));
            }
            affinity = new AffinityDataSource();
            affinity.setConfig("name = bench; nodes = RAC1, RAC2, RAC3");
            affinity.setNodeDataSources(new LinkedHashMap<String, DataSource>(pools));
            affinity.setHeartbeatIntervalMillis(0);
            affinity.setRegisterMBean(false);
            affinity.init();
            unpinned = new AffinityDataSource();
            unpinned.setConfig("name = bench-unpinned; nodes = RAC1, RAC2, RAC3");
            unpinned.setNodeDataSources(new LinkedHashMap<String, DataSource>(pools));
            unpinned.setHeartbeatIntervalMillis(0);
            unpinned.setRegisterMBean(false);
            unpinned.init();
        }

        /** The data sources of {@link #oneNode} and their pins, closed at {@link #tearDown}. */
        private final List<AutoCloseable> oneNode = new ArrayList<>();

        /**
         * A data source of one node ({@code node}, over the same pool) with its fast connection failover
         * bookkeeping off (a control, never shipped), the calling thread pinned to it: what that
         * bookkeeping costs a pinned borrow, beside {@link #affinity} in the same rounds.
         */
        public AffinityDataSource withoutFailover(String node) throws SQLException {
            return oneNode(node, false);
        }

        /**
         * A data source of one node ({@code node}, over the same pool), the calling thread pinned to it;
         * with {@code failover} false its fast connection failover bookkeeping is off (a control, never
         * shipped). Two of them that differ in {@code failover} alone give the bookkeeping's cost; two
         * alike, the resolution of that comparison.
         */
        public AffinityDataSource oneNode(String node, boolean failover) throws SQLException {
            AffinityDataSource d = new AffinityDataSource();
            d.setConfig("name = bench-one-node-" + oneNode.size() + "; nodes = " + node);
            d.setNodeDataSources(new LinkedHashMap<String, DataSource>(Map.of(node, pools.get(node))));
            d.setHeartbeatIntervalMillis(0);
            d.setRegisterMBean(false);
            d.init();
            if (!failover) {
                io.racaffinity.jdbc.PinnedBorrowParts.failoverOff(d);
            }
            oneNode.add(d::close);
            oneNode.add(d.pin()::close);
            return d;
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            for (int i = oneNode.size() - 1; i >= 0; i--) {
                try {
                    oneNode.get(i).close();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }
            affinity.close();
            unpinned.close();
            pools.values().forEach(HikariDataSource::close);
        }
    }

    /** The benchmark thread's pin, and the bare pool of the pinned node. */
    @State(Scope.Thread)
    public static class Pinned {
        Pin pin;
        HikariDataSource bare;

        @Setup(Level.Trial)
        public void setUp(Pools p) throws SQLException {
            pin = p.affinity.pin();
            bare = p.pools.get(pin.nodeName());
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            pin.close();
        }
    }

    /**
     * Request replay's recording cost ([continuity]): two {@code AffinityDataSource}s over one
     * HikariCP pool of node 1 (the only node of each, so both route alike), one with
     * {@code replay=true}, one without. A request is {@link #request}.
     */
    @State(Scope.Benchmark)
    public static class Replay {
        public HikariDataSource pool;
        public AffinityDataSource on;
        public AffinityDataSource off;

        @Setup(Level.Trial)
        public void setUp() throws SQLException {
            String url = System.getenv("RACAFF_NODE1_URL");
            HikariConfig c = new HikariConfig();
            c.setJdbcUrl(url != null ? url : "jdbc:postgresql://127.0.0.1:55431/postgres");
            c.setUsername("postgres");
            c.setDriverClassName("org.postgresql.Driver");
            c.setMaximumPoolSize(2);
            c.setMinimumIdle(2);
            c.setPoolName("bench-replay-RAC1");
            pool = new HikariDataSource(c);
            on = replayDataSource("bench-replay-on", true);
            off = replayDataSource("bench-replay-off", false);
        }

        private AffinityDataSource replayDataSource(String name, boolean replay) throws SQLException {
            AffinityDataSource ds = new AffinityDataSource();
            ds.setConfig("name = " + name + "; nodes = RAC1");
            ds.setNodeDataSources(new LinkedHashMap<String, DataSource>(Map.of("RAC1", pool)));
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            ds.setReplay(replay);
            ds.init();
            return ds;
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            on.close();
            off.close();
            pool.close();
        }
    }

    /** What {@link #request} reads before COMMIT besides its {@code SELECT 1}. */
    public static final String[] XID_QUERIES = {
        null,
        // what replay read until 2026-12-04: assigns an xid to a transaction that has none (this
        // one wrote nothing)
        "SELECT pg_current_xact_id()::text, pg_backend_pid()",
        // what replay reads now: the same round trip without assigning one
        "SELECT pg_current_xact_id_if_assigned()::text, pg_backend_pid()",
    };

    /**
     * One request as an application makes it: a connection, auto-commit off, {@code SELECT 1}
     * with its row read, COMMIT, close. With {@code xidQuery} 1, the application itself reads what
     * replay reads before COMMIT, so that replay's recording alone is the difference; with 2, the
     * same round trip without assigning a transaction id.
     */
    public static int request(DataSource ds, int xidQuery) throws SQLException {
        try (Connection c = ds.getConnection()) {
            c.setAutoCommit(false);
            int v = select1(c);
            if (xidQuery > 0) {
                try (Statement s = c.createStatement();
                        ResultSet rs = s.executeQuery(XID_QUERIES[xidQuery])) {
                    rs.next();
                    v += rs.getInt(2) & 1;
                }
            }
            c.commit();
            return v;
        }
    }

    @Benchmark
    public int replayOff(Replay r) throws SQLException {
        return request(r.off, 0);
    }

    @Benchmark
    public int replayOn(Replay r) throws SQLException {
        return request(r.on, 0);
    }

    private static int select1(Connection c) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT 1")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    @Benchmark
    public Connection bareHikari(Pinned t) throws SQLException {
        Connection c = t.bare.getConnection();
        c.close();
        return c;
    }

    @Benchmark
    public Connection affinityPinned(Pools p, Pinned t) throws SQLException {
        Connection c = p.affinity.getConnection();
        c.close();
        return c;
    }

    /** Balanced over the three pools (each like the bare one): the unpinned borrow's own cost. */
    @Benchmark
    public Connection affinityUnpinned(Pools p) throws SQLException {
        Connection c = p.unpinned.getConnection();
        c.close();
        return c;
    }

    @Benchmark
    public int bareHikariSelect1(Pinned t) throws SQLException {
        try (Connection c = t.bare.getConnection()) {
            return select1(c);
        }
    }

    @Benchmark
    public int affinityPinnedSelect1(Pools p, Pinned t) throws SQLException {
        try (Connection c = p.affinity.getConnection()) {
            return select1(c);
        }
    }
}
