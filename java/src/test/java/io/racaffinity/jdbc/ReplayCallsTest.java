package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.ReplayConnection.refusalOf;
import static io.racaffinity.jdbc.ReplayFixture.NAMES;
import static io.racaffinity.jdbc.ReplayFixture.insert;
import static io.racaffinity.jdbc.ReplayFixture.resetTable;
import static io.racaffinity.jdbc.ReplayFixture.rowsOf;
import static io.racaffinity.jdbc.ReplayFixture.total;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Continuity.Refusal;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Request replay's handling of single JDBC calls on real nodes (docs/continuity.md, "Java"): calls
 * another thread makes while one runs, and calls the record leaves out, each with the typed
 * refusal the docs promise when its connection fails.
 */
@ExtendWith(PgNodes.class)
class ReplayCallsTest {
    private Pools pools;

    @BeforeEach
    void table() throws SQLException {
        resetTable(null);
    }

    @AfterEach
    void close() {
        if (pools != null) {
            pools.close();
        }
    }

    private AffinityDataSource ds(String name) {
        pools = new Pools(NAMES, c -> {});
        return ReplayFixture.dataSource(pools, name, true);
    }

    /** Whether a statement whose text starts with {@code prefix} runs on node {@code node}. */
    private static boolean running(int node, String prefix) throws SQLException {
        try (Connection d = DriverManager.getConnection(PgNodes.url(node), "postgres", "");
                Statement t = d.createStatement();
                ResultSet rs = t.executeQuery("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                        + " AND query LIKE '" + prefix + "%' AND pid <> pg_backend_pid()")) {
            rs.next();
            return rs.getInt(1) > 0;
        }
    }

    /** Ends, from a session of its own, the backends of node {@code node} idle in a transaction. */
    private static void endOpenTransactions(int node) throws SQLException {
        try (Connection d = DriverManager.getConnection(PgNodes.url(node), "postgres", "");
                Statement t = d.createStatement();
                ResultSet rs = t.executeQuery("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                        + " WHERE state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()")) {
            rs.next();
            assertTrue(rs.getInt(1) > 0, "a transaction was open on node " + node);
        }
    }

    @Test
    void aStatementIsCancelledFromAnotherThreadWhileItRuns() throws Exception {
        AffinityDataSource ds = ds("calls-cancel");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                Statement s = c.createStatement()) {
            c.setAutoCommit(false);
            insert(c, "cancel1");
            CompletableFuture<SQLException> sleeping = CompletableFuture.supplyAsync(() -> {
                try {
                    s.execute("SELECT pg_sleep(30)");
                    return null;
                } catch (SQLException e) {
                    return e;
                }
            });
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!running(1, "SELECT pg_sleep(30)")) {
                assertTrue(System.nanoTime() < until, "the statement runs on MYDB1");
                Thread.sleep(20);
            }
            long t0 = System.nanoTime();
            CompletableFuture<Void> cancelling = CompletableFuture.runAsync(() -> {
                try {
                    s.cancel();
                } catch (SQLException e) {
                    throw new IllegalStateException(e);
                }
            });
            // JDBC: cancel is how another thread ends a statement that runs; it must not wait for it.
            cancelling.get(5, TimeUnit.SECONDS);
            SQLException e = sleeping.get(5, TimeUnit.SECONDS);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(ms < 5000, "cancelled after " + ms + " ms");
            assertEquals("57014", e.getSQLState(), String.valueOf(e));
            assertEquals(Refusal.NOT_RECOVERABLE, refusalOf(e), "the application's error: " + e);
            c.rollback();
            insert(c, "cancel2");
            c.commit();
        }
        assertEquals(0, total(rowsOf("cancel1")), "rolled back");
        assertEquals(1, total(rowsOf("cancel2")), "the connection goes on after the cancel");
    }

    @Test
    void aSavepointOnAFailedConnectionSurfacesTheTypedRefusal() throws Exception {
        AffinityDataSource ds = ds("calls-savepoint");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "sp1");
            endOpenTransactions(1);
            // The docs: a savepoint makes the request not replayable, and a refusal carries its cause.
            SQLException e = assertThrows(SQLException.class, c::setSavepoint);
            assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed refusal of " + e);
        }
        assertEquals(0, total(rowsOf("sp1")));
    }
}
