package io.racaffinity.bench;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.Pin;
import io.racaffinity.jdbc.AffinityDataSource;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.LinkedHashMap;
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

        @TearDown(Level.Trial)
        public void tearDown() {
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
