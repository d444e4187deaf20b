package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariConfig;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Stubs;
import io.racaffinity.testsupport.FaultProxy;
import io.racaffinity.testsupport.FaultProxy.Hold;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Supplier;
import javax.sql.DataSource;

/**
 * What the replay tests on real nodes share ({@link ReplayTest}, {@link ReplayGuardsTest},
 * {@link ReplayCallsTest}, {@link OutcomeCheckDeadlineTest}, {@link ReplayCountsTest}, each a
 * {@link ReplayNodes}): the {@code java_req} table on the three nodes, an
 * {@link AffinityDataSource} over the three as independent databases, node 1's pool through a
 * {@link FaultProxy}, a COMMIT the proxy holds the reply of (and one whose node is killed while it
 * does), a request's open transaction ended under it, and the rows counted by SQL on every node.
 */
final class ReplayFixture {
    static final List<String> NAMES = AffinityDataSourceTest.NAMES;
    /**
     * Three independent databases ({@code recovery.scope = node}, the default: only the node that
     * ran a COMMIT can tell its outcome); no thread pins, so each connection is routed by its key.
     */
    static final String NODES = "database = orcl; service = svc; nodes = MYDB1, MYDB2, MYDB3; policy = random;"
            + " thread.auto_pin = false";
    /** The outcome check's deadline of the data sources here ({@code heartbeatTimeoutSeconds}). */
    static final int CHECK_SECONDS = 2;

    private ReplayFixture() {}

    /**
     * Creates {@code java_req} on every node and empties it of the ids {@code LIKE idsLike}
     * (null: of every row).
     */
    static void resetTable(String idsLike) throws SQLException {
        for (int i = 1; i <= 3; i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement s = c.createStatement()) {
                s.execute("CREATE TABLE IF NOT EXISTS java_req (id text PRIMARY KEY)");
                if (idsLike == null) {
                    s.execute("TRUNCATE java_req");
                } else {
                    try (PreparedStatement d = c.prepareStatement("DELETE FROM java_req WHERE id LIKE ?")) {
                        d.setString(1, idsLike);
                        d.executeUpdate();
                    }
                }
            }
        }
    }

    /** HikariCP pools of the three nodes, node 1's ({@code MYDB1}) through {@code proxy}; {@code tweak} first. */
    static Pools throughProxy(FaultProxy proxy, Consumer<HikariConfig> tweak) {
        return new Pools(NAMES, c -> {
            tweak.accept(c);
            if (c.getPoolName().endsWith("MYDB1")) {
                c.setJdbcUrl(proxy.url());
            }
        });
    }

    /** {@link #dataSource(Pools, Map, String, boolean)} over the pools themselves. */
    static AffinityDataSource dataSource(Pools pools, String name, boolean replay) {
        return dataSource(pools, pools.asMap(), name, replay);
    }

    /**
     * A data source {@code name} of {@link #NODES} over {@code nodes} (the pools', or views of
     * them): no heartbeat (the tests set node states), no MBean, the outcome check's deadline
     * {@link #CHECK_SECONDS}; {@code pools} closes it.
     */
    static AffinityDataSource dataSource(Pools pools, Map<String, DataSource> nodes, String name, boolean replay) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; " + NODES);
        ds.setNodeDataSources(nodes);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        ds.setReplay(replay);
        ds.setHeartbeatTimeoutSeconds(CHECK_SECONDS);
        return pools.own(ds);
    }

    /** Node name → rows with id {@code id} there. */
    static Map<String, Integer> rowsOf(String id) throws SQLException {
        return rowsIn("java_req", id);
    }

    /** Node name → rows with id {@code id} in {@code table} there. */
    static Map<String, Integer> rowsIn(String table, String id) throws SQLException {
        Map<String, Integer> out = new LinkedHashMap<>();
        for (int i = 1; i <= 3; i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    PreparedStatement s = c.prepareStatement("SELECT count(*) FROM " + table + " WHERE id = ?")) {
                s.setString(1, id);
                try (ResultSet rs = s.executeQuery()) {
                    rs.next();
                    out.put(NAMES.get(i - 1), rs.getInt(1));
                }
            }
        }
        return out;
    }

    static int total(Map<String, Integer> rows) {
        return rows.values().stream().mapToInt(Integer::intValue).sum();
    }

    static void insert(Connection c, String id) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("INSERT INTO java_req VALUES (?)")) {
            s.setString(1, id);
            assertEquals(1, s.executeUpdate());
        }
    }

    static int count(Connection c, String like) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("SELECT count(*) FROM java_req WHERE id LIKE ?")) {
            s.setString(1, like);
            try (ResultSet rs = s.executeQuery()) {
                rs.next();
                return rs.getInt(1);
            }
        }
    }

    /** Ends the backend {@code pid} of node {@code node} from a session of its own (57P01 to its client). */
    static void terminate(String node, int pid) throws SQLException {
        try (Connection c = DriverManager.getConnection(PgNodes.url(NAMES.indexOf(node) + 1), "postgres", "");
                PreparedStatement s = c.prepareStatement("SELECT pg_terminate_backend(?, 5000)")) {
            s.setInt(1, pid);
            try (ResultSet rs = s.executeQuery()) {
                rs.next();
                assertTrue(rs.getBoolean(1));
            }
        }
    }

    static int backendPid(Connection c) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    /**
     * Ends, from a session of its own, the backends of node {@code node} idle in a transaction (the
     * request's: 57P01 at its next call). Not {@code pg_backend_pid()} through the request, which
     * would be recorded and answer otherwise on a replay.
     */
    static void endOpenTransactions(int node) throws SQLException {
        try (Connection d = DriverManager.getConnection(PgNodes.url(node), "postgres", "");
                Statement t = d.createStatement();
                ResultSet rs = t.executeQuery("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                        + " WHERE state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()")) {
            rs.next();
            assertTrue(rs.getInt(1) > 0, "a transaction was open on node " + node);
        }
    }

    /**
     * {@code node}, whose connections throw {@code failure}'s exception from their next call of
     * {@code method} once the test sets {@code armed[0]} (that call clears it, so it fails once);
     * every other call, and the data source's own, go through to {@code node}'s.
     */
    static DataSource failingOnce(DataSource node, String method, boolean[] armed,
            Supplier<? extends Exception> failure) {
        ClassLoader loader = ReplayFixture.class.getClassLoader();
        return (DataSource) Proxy.newProxyInstance(loader, new Class<?>[] {DataSource.class}, (p, m, a) -> {
            Object r = Stubs.forward(node, m, a);
            if (!(r instanceof Connection c)) {
                return r;
            }
            return Proxy.newProxyInstance(loader, new Class<?>[] {Connection.class}, (p2, m2, a2) -> {
                if (m2.getName().equals(method) && armed[0]) {
                    armed[0] = false;
                    throw failure.get();
                }
                return Stubs.forward(c, m2, a2);
            });
        });
    }

    /** A JDBC call that ends a transaction ({@code commit()}, {@code setAutoCommit(true)}). */
    @FunctionalInterface
    interface Ending {
        void run() throws SQLException;
    }

    /**
     * A COMMIT the server has run while the proxy holds its reply: {@link Hold#release()} lets the
     * reply go, and {@code ended} completes with the call's error (null: it succeeded).
     */
    record HeldCommit(Hold hold, CompletableFuture<SQLException> ended) {}

    /**
     * Runs {@code call} on another thread while {@code proxy} holds the reply of the COMMIT it
     * sends; returns once the server has run that COMMIT.
     */
    static HeldCommit commitHeld(FaultProxy proxy, Ending call) throws InterruptedException {
        Hold hold = proxy.holdNextCommitReply();
        CompletableFuture<SQLException> ended = CompletableFuture.supplyAsync(() -> {
            try {
                call.run();
                return null;
            } catch (SQLException e) {
                return e;
            }
        });
        assertTrue(hold.withheld.await(30, TimeUnit.SECONDS), "the COMMIT reached the server");
        return new HeldCommit(hold, ended);
    }

    /** How a {@link #commitThenKill} COMMIT ended: its error (null: it succeeded), and how long after the kill. */
    record CommitKilled(SQLException error, long millisAfterKill) {}

    /**
     * Commits {@code c} (a connection of node {@code node}, through {@code proxy}) on another
     * thread while the proxy holds the COMMIT's reply; once the server has run the COMMIT, kills
     * the node (pgnodes' {@code kill -9}), then lets the client's connection end. The COMMIT
     * committed, and the node that could tell is gone. The caller restarts the node.
     */
    static CommitKilled commitThenKill(Connection c, FaultProxy proxy, int node) throws Exception {
        HeldCommit held = commitHeld(proxy, c::commit);
        PgNodes.kill(node);
        long t0 = System.nanoTime();
        held.hold().release();
        SQLException e = held.ended().get(120, TimeUnit.SECONDS);
        return new CommitKilled(e, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
    }
}
