package io.racaffinity.jdbc;

import static io.racaffinity.test.Pools.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariPoolMXBean;
import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.test.LogCapture;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Stubs;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * {@link Connection#abort} of an {@link AffinityConnection} by the application (a watchdog ending a
 * hung call, or a connection it gives up on): the node pool gets its entry back, and a call that fails
 * because of the application's own abort, or on a connection it closed, is no failure of the node.
 */
@ExtendWith(PgNodes.class)
class ConnectionAbortTest {

    private static Pools onePool() {
        return new Pools(List.of("A"), c -> {
            c.setMaximumPoolSize(1);
            c.setMinimumIdle(0);
            c.setConnectionTimeout(2_000);
        });
    }

    private static NodeMetrics metrics(Cluster c) {
        return c.nodeMetrics().get(0);
    }

    @Test
    void anAbortedThenClosedConnectionGivesItsPoolEntryBack() throws Exception {
        try (Pools pools = onePool()) {
            AffinityDataSource ds = pools.affinity("name = abortidle; nodes = A");
            Connection c = ds.getConnection();
            c.abort(Runnable::run);
            assertTrue(c.isClosed(), "aborted is closed");
            c.close(); // a try-with-resources around the watchdog's abort
            HikariPoolMXBean pool = pools.get("A").getHikariPoolMXBean();
            assertTrue(await(Duration.ofSeconds(5), () -> pool.getActiveConnections() == 0),
                    "the pool's only entry is still in use after abort + close: "
                            + pool.getActiveConnections() + " active");
            // The one-connection pool serves again (it timed out after 2 s when the entry leaked).
            try (Connection again = ds.getConnection()) {
                assertEquals(PgNodes.port(1), Pools.serverPort(again));
            }
            assertEquals(0, metrics(ds.getCluster()).inFlight(), "no lease left in flight");
        }
    }

    @Test
    void aCallEndedByTheApplicationsOwnAbortIsNoNodeFailure() throws Exception {
        try (Pools pools = onePool()) {
            AffinityDataSource ds = pools.affinity("name = abortbusy; nodes = A");
            Connection c = ds.getConnection();
            CountDownLatch callFailed = new CountDownLatch(1);
            CompletableFuture<SQLException> call = CompletableFuture.supplyAsync(() -> {
                try (Statement s = c.createStatement()) {
                    s.execute("SELECT pg_sleep(60)");
                    return null;
                } catch (SQLException e) {
                    return e;
                } finally {
                    callFailed.countDown();
                }
            });
            awaitSleeping();
            // An executor that ends the physical connection at once and returns only after the
            // caller's call has failed: the order a slow abort() caller (or a descheduled one) sees.
            c.abort(r -> {
                r.run();
                try {
                    callFailed.await(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            SQLException e = call.get(30, TimeUnit.SECONDS);
            assertTrue(e != null && e.getSQLState() != null && e.getSQLState().startsWith("08"),
                    "the call ended with a connection error: " + e);
            c.close();
            NodeMetrics m = metrics(ds.getCluster());
            assertEquals(0, m.failures(), "the application's abort counted as a failure of a healthy node");
            assertEquals(0, m.inFlight());
        }
    }

    /**
     * A call on a closed connection says so with SQLState 08003, as pgjdbc (an unpooled node) and the replay
     * connection do: HikariCP's closed proxy throws "Connection is closed" with no SQLState, which an application's
     * handler that sorts errors by SQLState could not place.
     */
    @Test
    void aCallOnAClosedConnectionIs08003() throws Exception {
        try (Pools pools = onePool()) {
            AffinityDataSource ds = pools.affinity("name = closedcall; nodes = A");
            Connection c = ds.getConnection();
            c.close();
            SQLException autoCommit = assertThrows(SQLException.class, c::getAutoCommit);
            assertEquals("08003", autoCommit.getSQLState(), autoCommit.toString());
            SQLException statement = assertThrows(SQLException.class, c::createStatement);
            assertEquals("08003", statement.getSQLState(), statement.toString());
            SQLException commit = assertThrows(SQLException.class, c::commit);
            assertEquals("08003", commit.getSQLState(), commit.toString());
            assertEquals(0, metrics(ds.getCluster()).inFlight(), "nothing in flight, no node failure counted");
            assertEquals(0, metrics(ds.getCluster()).failures());
        }
    }

    @Test
    void abortOfAClosedConnectionIsANoOp() throws Exception {
        try (Pools pools = onePool()) {
            AffinityDataSource ds = pools.affinity("name = abortclosed; nodes = A");
            Connection c = ds.getConnection();
            c.close();
            c.abort(Runnable::run);
            assertThrows(SQLException.class, () -> c.abort(null), "a null executor is refused (JDBC)");
            assertEquals(0, metrics(ds.getCluster()).inFlight());
        }
    }

    @Test
    void aCallOnAClosedConnectionIsNoNodeFailure() throws Exception {
        try (LogCapture log = new LogCapture()) {
            AffinityDataSource ds = new AffinityDataSource();
            // Unpooled (no dataSourceClassName): pgjdbc's closed connection answers 08003, as ojdbc's
            // (ORA-17008) does under UCP.
            ds.setConfig("name = closedcall; nodes = A");
            ds.setNodeUrls(Map.of("A", PgNodes.url(1)));
            ds.setUser("postgres");
            ds.setHeartbeatIntervalMillis(0);
            try (ds) {
                Connection c = ds.getConnection();
                c.close();
                SQLException e = assertThrows(SQLException.class, c::getAutoCommit);
                assertEquals("08003", e.getSQLState(), e.toString());
                List<String> reported = log.records().stream().map(r -> r.getMessage())
                        .filter(m -> m.contains("connection failure on node")).toList();
                assertEquals(List.of(), reported, "a call on a closed connection reported a node failure");
            }
        }
    }

    @Test
    void abortEndsACloseHungOnItsConnectionWithoutANodeFailure() throws Exception {
        CountDownLatch closing = new CountDownLatch(1);
        CountDownLatch aborted = new CountDownLatch(1);
        // A pool whose close() of a borrowed connection hangs (its rollback on return waits on a
        // node that stopped answering) until the connection under it is aborted.
        Connection hanging = Stubs.proxy(Connection.class, "hanging", (p, m, a) -> switch (m.getName()) {
            case "close" -> {
                closing.countDown();
                if (!aborted.await(30, TimeUnit.SECONDS)) {
                    throw new AssertionError("never aborted");
                }
                throw new SQLException("An I/O error occurred while sending to the backend.", "08006");
            }
            case "abort" -> {
                aborted.countDown();
                yield null;
            }
            case "isClosed" -> false;
            default -> null;
        });
        try (Cluster cluster = Cluster.fromConfig("name = aborthungclose; nodes = A");
                AffinityDataSource ds = handingOut(cluster, hanging)) {
            Connection c = ds.getConnection();
            CompletableFuture<SQLException> close = CompletableFuture.supplyAsync(() -> {
                try {
                    c.close();
                    return null;
                } catch (SQLException e) {
                    return e;
                }
            });
            assertTrue(closing.await(30, TimeUnit.SECONDS));
            c.abort(Runnable::run); // the application's watchdog
            assertEquals(0, aborted.getCount(), "abort() did not reach the connection a hung close() waits on");
            SQLException e = close.get(30, TimeUnit.SECONDS);
            assertEquals("08006", e == null ? null : e.getSQLState());
            NodeMetrics m = metrics(cluster);
            assertEquals(0, m.failures(), "the application's abort counted as a failure of the node");
            assertEquals(0, m.inFlight());
        }
    }

    /**
     * A data source over {@code cluster}'s one node A, whose pool (not HikariCP) hands out {@code handle} at every
     * getConnection; no heartbeat, no MBean.
     */
    private static AffinityDataSource handingOut(Cluster cluster, Connection handle) {
        DataSource node = Stubs.proxy(DataSource.class, "node", (p, m, a) -> m.getName().equals("getConnection")
                ? handle : null);
        AffinityDataSource ds = new AffinityDataSource();
        ds.setCluster(cluster);
        ds.setNodeDataSources(Map.of("A", node));
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return ds;
    }

    @Test
    void abortOnAnotherPoolDoesItsWorkThroughTheGivenExecutor() throws Exception {
        // JDBC: abort's work is done through the executor, and the call returns promptly. The pool
        // (not HikariCP) closes its handle on return, which may wait on the node: it must not run here.
        List<String> calls = new java.util.concurrent.CopyOnWriteArrayList<>();
        Connection handle = Stubs.proxy(Connection.class, "handle", (p, m, a) -> switch (m.getName()) {
            case "abort" -> {
                calls.add("abort");
                ((java.util.concurrent.Executor) a[0]).execute(() -> calls.add("abort's work"));
                yield null;
            }
            case "close" -> {
                calls.add("close on " + Thread.currentThread().getName());
                yield null;
            }
            case "isClosed" -> false;
            default -> null;
        });
        try (Cluster cluster = Cluster.fromConfig("name = abortexecutor; nodes = A");
                AffinityDataSource ds = handingOut(cluster, handle)) {
            Connection c = ds.getConnection();
            List<Runnable> queued = new java.util.ArrayList<>();
            c.abort(queued::add);
            assertEquals(List.of("abort"), calls, "abort() did work on the caller's thread");
            assertTrue(c.isClosed(), "an aborted connection is closed at once");
            assertEquals(0, metrics(cluster).inFlight(), "the lease is released by abort() itself");
            Thread worker = new Thread(() -> queued.forEach(Runnable::run), "abort-executor");
            worker.start();
            worker.join(30_000);
            assertEquals(List.of("abort", "abort's work", "close on abort-executor"), calls);
        }
    }

    /** Waits until node 1 runs a {@code pg_sleep} (the call is on the server, not on its way there). */
    private static void awaitSleeping() throws Exception {
        try (Connection probe = java.sql.DriverManager.getConnection(PgNodes.url(1), "postgres", null)) {
            assertTrue(await(Duration.ofSeconds(20), () -> {
                try (Statement s = probe.createStatement();
                        ResultSet rs = s.executeQuery("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                                + " AND query LIKE 'SELECT pg_sleep(60)%'")) {
                    rs.next();
                    return rs.getInt(1) == 1;
                } catch (SQLException e) {
                    throw new IllegalStateException(e);
                }
            }), "the call never reached the server");
        }
    }
}
