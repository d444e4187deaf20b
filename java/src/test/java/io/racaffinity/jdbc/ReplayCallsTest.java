package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.ReplayConnection.refusalOf;
import static io.racaffinity.jdbc.ReplayFixture.NAMES;
import static io.racaffinity.jdbc.ReplayFixture.backendPid;
import static io.racaffinity.jdbc.ReplayFixture.commitHeld;
import static io.racaffinity.jdbc.ReplayFixture.endOpenTransactions;
import static io.racaffinity.jdbc.ReplayFixture.insert;
import static io.racaffinity.jdbc.ReplayFixture.rowsIn;
import static io.racaffinity.jdbc.ReplayFixture.rowsOf;
import static io.racaffinity.jdbc.ReplayFixture.total;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.NodeState;
import io.racaffinity.jdbc.ReplayFixture.HeldCommit;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.testsupport.FaultProxy;
import io.racaffinity.testsupport.FaultProxy.Hold;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Request replay's handling of single JDBC calls on real nodes (docs/continuity.md, "Java"): calls
 * another thread makes while one runs, and calls the record leaves out, each with the typed
 * refusal the docs promise when its connection fails.
 */
class ReplayCallsTest extends ReplayNodes {
    /** A data source with replay over plain pools of the three nodes. */
    private AffinityDataSource ds(String name) {
        pools = new Pools(NAMES, c -> {});
        return ds(name, true);
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

    @Test
    void aCommitFoundCommittedSucceedsThoughNoNodeTakesTheSessionAtOnce() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = ReplayFixture.throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("calls-reattach", true);
            // No node is picked while every one is Down: the session has nowhere to go after the COMMIT.
            ds.setConfig("name = calls-reattach; " + ReplayFixture.NODES + "; panic = fail");
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            c.setAutoCommit(false);
            insert(c, "re1");
            HeldCommit held = commitHeld(proxy, c::commit);
            Cluster cluster = ds.getCluster();
            for (String n : NAMES) {
                cluster.setNodeState(n, NodeState.DOWN);
            }
            held.hold().release(); // the COMMIT ran; its answer never comes
            SQLException e = held.ended().get(60, TimeUnit.SECONDS);
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("re1"), "committed once");
            assertEquals(1, ds.getReplayCounts().committedAlready(), String.valueOf(ds.getReplayCounts()));
            // Found committed: the request succeeded, and an error here would have the application
            // run it again (a second commit), whatever becomes of the session after it.
            assertNull(e, "commit() of a COMMIT found committed failed: " + e);
            assertTrue(!c.isClosed(), "the connection is the application's until it closes it");
            // A request boundary needs no node connection: it marks where the record starts.
            c.endRequest();
            c.beginRequest();
            SQLException down = assertThrows(SQLException.class, () -> insert(c, "re2"),
                    "no node takes the next transaction");
            assertNull(refusalOf(down), "nothing of it was replayed or refused: " + down);
            for (String n : NAMES) {
                cluster.setNodeState(n, NodeState.UP);
            }
            c.rollback();
            insert(c, "re3"); // a new transaction, on a node that takes it
            c.commit();
            c.close();
            assertEquals(0, total(rowsOf("re2")));
            assertEquals(1, total(rowsOf("re3")));
            cluster.nodeMetrics().forEach(m -> assertEquals(0, m.inFlight(), m.name() + ": leases released"));
        }
    }

    @Test
    void aSetAutoCommitWhoseCommitIsFoundCommittedSucceedsThoughNoNodeTakesTheSessionAtOnce() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = ReplayFixture.throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("calls-reattach-ac", true);
            ds.setConfig("name = calls-reattach-ac; " + ReplayFixture.NODES + "; panic = fail");
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            c.setAutoCommit(false);
            insert(c, "ra1");
            HeldCommit held = commitHeld(proxy, () -> c.setAutoCommit(true)); // JDBC: commits the transaction
            Cluster cluster = ds.getCluster();
            for (String n : NAMES) {
                cluster.setNodeState(n, NodeState.DOWN);
            }
            held.hold().release();
            SQLException e = held.ended().get(60, TimeUnit.SECONDS);
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("ra1"), "committed once");
            assertNull(e, "setAutoCommit(true) whose COMMIT was found committed failed: " + e);
            assertTrue(c.getAutoCommit());
            for (String n : NAMES) {
                cluster.setNodeState(n, NodeState.UP);
            }
            insert(c, "ra2"); // auto-commit, as the application set it: committed by itself
            assertEquals(1, total(rowsOf("ra2")), "auto-committed");
            c.close();
            cluster.nodeMetrics().forEach(m -> assertEquals(0, m.inFlight(), m.name() + ": leases released"));
        }
    }

    @Test
    void aConnectionLeftWithoutANodeConnectionAfterACommitFoundCommittedIsValid() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = ReplayFixture.throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("calls-detached-valid", true);
            ds.setConfig("name = calls-detached-valid; " + ReplayFixture.NODES + "; panic = fail");
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "dv1");
                HeldCommit held = commitHeld(proxy, c::commit);
                Cluster cluster = ds.getCluster();
                for (String n : NAMES) {
                    cluster.setNodeState(n, NodeState.DOWN);
                }
                held.hold().release();
                assertNull(held.ended().get(60, TimeUnit.SECONDS), "found committed");
                // No node took the session: the connection has none until its next call takes one.
                assertTrue(!c.isClosed(), "open");
                assertTrue(c.isValid(5), "not closed, nothing of it lost: the next call takes a node connection");
                assertTrue(c.isValid(0), "the same without a timeout");
                for (String n : NAMES) {
                    cluster.setNodeState(n, NodeState.UP);
                }
                assertTrue(c.isValid(5), "valid once nodes are back, before any call");
                insert(c, "dv2");
                c.commit();
                assertTrue(c.isValid(5), "valid on its node connection");
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("dv1"), "committed once");
            assertEquals(1, total(rowsOf("dv2")), "the connection went on");
        }
    }

    @Test
    void aRollbackWhoseConnectionFailedWithNoNodeToTakeTheSessionLeavesTheConnectionUsable() throws Exception {
        AffinityDataSource ds = ds("calls-rollback-detached");
        ds.setConfig("name = calls-rollback-detached; " + ReplayFixture.NODES + "; panic = fail");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "rb1");
            endOpenTransactions(1);
            Cluster cluster = ds.getCluster();
            for (String n : NAMES) {
                cluster.setNodeState(n, NodeState.DOWN);
            }
            // The transaction is gone with its connection, which is what a rollback wants.
            c.rollback();
            for (String n : NAMES) {
                cluster.setNodeState(n, NodeState.UP);
            }
            insert(c, "rb2");
            c.commit();
        }
        assertEquals(0, total(rowsOf("rb1")));
        assertEquals(1, total(rowsOf("rb2")), "the connection goes on once a node takes it");
    }

    @Test
    void aRefusedErrorWhoseDriverGaveItANullCauseCarriesTheRefusal() throws Exception {
        pools = new Pools(NAMES, c -> {});
        boolean[] failNext = {false};
        Map<String, javax.sql.DataSource> nodes = new java.util.LinkedHashMap<>();
        for (String name : NAMES) {
            // As drivers write it when they have no cause: the cause is set, to null.
            nodes.put(name, ReplayFixture.failingOnce(pools.get(name), "prepareStatement", failNext,
                    () -> new SQLException("the connection was lost", "08006", (Throwable) null)));
        }
        AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "calls-null-cause", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "nc1");
            c.getMetaData(); // the request is not replayable from now on
            failNext[0] = true;
            SQLException e = assertThrows(SQLException.class, () -> insert(c, "nc2"));
            assertEquals("08006", e.getSQLState(), "the original error: " + e);
            assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed: " + e);
        }
        assertEquals(0, total(rowsOf("nc1")));
    }

    @Test
    void aWriteThroughAResultSetOfAnEndedTransactionIsNeverLostToAReplay() throws Exception {
        for (int i = 1; i <= 3; i++) {
            try (Connection d = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement t = d.createStatement()) {
                t.execute("INSERT INTO java_req VALUES ('u1')");
            }
        }
        AffinityDataSource ds = ds("calls-updatable");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                Statement s = c.createStatement(ResultSet.TYPE_FORWARD_ONLY, ResultSet.CONCUR_UPDATABLE)) {
            ResultSet rs = s.executeQuery("SELECT id FROM java_req WHERE id = 'u1'"); // auto-commit: ended
            assertTrue(rs.next());
            c.setAutoCommit(false);
            rs.updateString(1, "u1-updated");
            rs.updateRow(); // an UPDATE in the transaction that begins here
            insert(c, "u2");
            endOpenTransactions(1);
            try {
                c.commit();
            } catch (SQLException e) {
                assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed: " + e);
            }
        }
        // Committed (the update with it) or refused: never the transaction without its update.
        assertEquals(total(rowsOf("u2")), total(rowsOf("u1-updated")),
                "u2 committed without the update made in its transaction");
    }

    @Test
    void aReplaysConnectFailureNeverShowsTheDriversCredentials() throws Exception {
        pools = new Pools(NAMES, c -> {});
        String secret = "tiger";
        Map<String, javax.sql.DataSource> nodes = new java.util.LinkedHashMap<>();
        nodes.put("MYDB1", pools.get("MYDB1"));
        for (String name : List.of("MYDB2", "MYDB3")) {
            // A driver that writes the URL, credentials and all, into its message.
            nodes.put(name, io.racaffinity.test.Stubs.proxy(javax.sql.DataSource.class, name, (p, m, a) -> {
                if (m.getName().equals("getConnection")) {
                    throw new SQLException("No suitable driver found for jdbc:oracle:thin:scott/" + secret
                            + "@//h1:1521/svc", "08001");
                }
                return null;
            }));
        }
        AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "calls-replay-redact", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "rd1");
            endOpenTransactions(1);
            SQLException e = assertThrows(SQLException.class, c::commit, "the replay's node cannot be reached");
            assertTrue(refusalOf(e) != null, "typed: " + e);
            CredentialRedactionTest.assertNoSecret(e, secret);
        }
    }

    @Test
    void eachRequestTheApplicationMarksMayBeReplayedOnce() throws Exception {
        AffinityDataSource ds = ds("calls-request-boundary");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "rq1");
            endOpenTransactions(1);
            c.commit(); // replayed on another node
            c.endRequest(); // JDBC 4.3: the request ends; the next one is independent of it
            c.beginRequest();
            insert(c, "rq2");
            // The node the first replay went to: end its open transaction there.
            int node = 0;
            for (int i = 1; i <= 3; i++) {
                if (ReplayFixture.rowsOf("rq1").get(NAMES.get(i - 1)) == 1) {
                    node = i;
                }
            }
            endOpenTransactions(node);
            c.commit();
        }
        assertEquals(1, total(rowsOf("rq1")));
        assertEquals(1, total(rowsOf("rq2")), "the second request was replayed too");
        assertEquals(2, ds.getReplayCounts().replayed(), String.valueOf(ds.getReplayCounts()));
    }

    /** Node name → rows with id {@code id} in {@code alt.java_req}. */
    private static Map<String, Integer> altRowsOf(String id) throws SQLException {
        return rowsIn("alt.java_req", id);
    }

    private static void altTable() throws SQLException {
        for (int i = 1; i <= 3; i++) {
            try (Connection d = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement t = d.createStatement()) {
                t.execute("CREATE SCHEMA IF NOT EXISTS alt");
                t.execute("CREATE TABLE IF NOT EXISTS alt.java_req (id text PRIMARY KEY)");
                t.execute("TRUNCATE alt.java_req");
            }
        }
    }

    @Test
    void anApplicationNameSetBeforeTheTransactionBeganHoldsOnAReplayAfterARollback() throws Exception {
        AffinityDataSource ds = ds("calls-appname-rollback");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            // pgjdbc sends its SET without a BEGIN when no transaction is open: a rollback keeps it.
            c.setClientInfo("ApplicationName", "calls-app");
            c.rollback();
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SHOW application_name")) {
                rs.next();
                assertEquals("calls-app", rs.getString(1));
            }
            insert(c, "an1");
            endOpenTransactions(1);
            c.commit(); // replayed: the replay reads the same name
        }
        assertEquals(1, total(rowsOf("an1")));
        assertEquals(0, rowsOf("an1").get("MYDB1"));
    }

    @Test
    void aSchemaSetInATransactionRolledBackDoesNotHoldOnALaterReplay() throws Exception {
        altTable();
        AffinityDataSource ds = ds("calls-schema-rollback");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            c.setSchema("alt");
            c.rollback(); // PostgreSQL: the SET the driver sent is rolled back with the transaction
            insert(c, "sch1"); // so this goes to public.java_req
            endOpenTransactions(1);
            try {
                c.commit();
            } catch (SQLException e) {
                assertTrue(refusalOf(e) != null, "a refusal is typed: " + e);
            }
        }
        assertEquals(0, total(altRowsOf("sch1")), "written where the application's session never wrote");
        assertEquals(1, total(rowsOf("sch1")), "replayed where the session wrote");
        // Set in auto-commit mode, the schema is the session's: a rollback later leaves it.
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setSchema("alt");
            c.setAutoCommit(false);
            insert(c, "sch2-rolled-back");
            c.rollback();
            insert(c, "sch2");
            endOpenTransactions(1);
            c.commit();
        }
        assertEquals(1, total(altRowsOf("sch2")), "replayed under the schema the session had");
        assertEquals(0, total(rowsOf("sch2")));
    }

    /** The refusal's text (cause or suppressed), for its reason. */
    private static String refusalText(SQLException e) {
        for (Throwable t = e.getCause(); t != null; t = t.getCause()) {
            if (t instanceof io.racaffinity.Continuity.ReplayRefusedException r) {
                return r.getMessage();
            }
        }
        for (Throwable t : e.getSuppressed()) {
            if (t instanceof io.racaffinity.Continuity.ReplayRefusedException r) {
                return r.getMessage();
            }
        }
        return null;
    }

    @Test
    void aSearchPathSetBySqlBeforeTheTransactionRefusesItsReplay() throws Exception {
        altTable();
        AffinityDataSource ds = ds("calls-set-sql");
        // Auto-commit: the session's from now on, and not in any record.
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            try (Statement s = c.createStatement()) {
                s.execute("SET search_path TO alt");
            }
            c.setAutoCommit(false);
            insert(c, "set1");
            endOpenTransactions(1);
            SQLException e = assertThrows(SQLException.class, c::commit, "a replay without the search_path");
            assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed refusal of " + e);
            assertTrue(String.valueOf(refusalText(e)).contains("session state set by SQL text"), refusalText(e));
        }
        assertEquals(0, total(rowsOf("set1")), "written where the application's session never wrote");
        assertEquals(0, total(altRowsOf("set1")), "the transaction ended with its connection");
        // In an earlier transaction the application committed: the session's too.
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.execute("SELECT pg_advisory_lock(42); SET search_path TO alt");
            }
            c.commit();
            insert(c, "set2");
            endOpenTransactions(1);
            SQLException e = assertThrows(SQLException.class, c::commit, "a replay without the lock and path");
            assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed refusal of " + e);
        }
        assertEquals(0, total(rowsOf("set2")) + total(altRowsOf("set2")));
        // Transaction-scoped settings end with their transaction: the later one is replayed.
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.execute("SET LOCAL search_path TO alt; SET TRANSACTION READ WRITE");
            }
            c.commit();
            insert(c, "set3");
            endOpenTransactions(1);
            c.commit(); // replayed
        }
        assertEquals(1, total(rowsOf("set3")), "replayed in the schema the session had");
        assertEquals(0, rowsOf("set3").get("MYDB1"));
    }

    @Test
    void aSearchPathSetBySqlInAnEarlierCheckoutRefusesTheReplayOfALaterOne() throws Exception {
        altTable();
        // One connection per node: the second checkout gets the physical connection the first left
        // its search_path on (the node pool resets only what the JDBC API set).
        pools = new Pools(NAMES, c -> c.setMaximumPoolSize(1));
        AffinityDataSource ds = ds("calls-set-sql-checkout", true);
        int pid;
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                Statement s = c.createStatement()) {
            s.execute("SET search_path TO alt");
            pid = backendPid(c);
        }
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            assertEquals(pid, backendPid(c), "the same physical connection");
            c.setAutoCommit(false);
            insert(c, "set4"); // alt.java_req, on this session
            endOpenTransactions(1);
            SQLException e = assertThrows(SQLException.class, c::commit, "a replay without the search_path");
            assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed refusal of " + e);
            assertTrue(String.valueOf(refusalText(e)).contains("session state set by SQL text"), refusalText(e));
        }
        assertEquals(0, total(rowsOf("set4")), "written where the application's session never wrote");
        assertEquals(0, total(altRowsOf("set4")));
    }

    @Test
    void aReplayNeverRunsOnAConnectionAnEarlierCheckoutSetSessionStateOn() throws Exception {
        altTable();
        // One connection per node: the replay gets the one an earlier checkout left in alt.
        pools = new Pools(NAMES, c -> c.setMaximumPoolSize(1));
        AffinityDataSource ds = ds("calls-set-sql-replay", true);
        for (String name : List.of("MYDB2", "MYDB3")) {
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, name)).build();
                    Statement s = c.createStatement()) {
                s.execute("SET search_path TO alt");
            }
        }
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "set5"); // public.java_req, on this session
            endOpenTransactions(1);
            SQLException e = assertThrows(SQLException.class, c::commit, "a replay under a search_path never set");
            assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed refusal of " + e);
            assertTrue(String.valueOf(refusalText(e)).contains("session state set by SQL text"), refusalText(e));
        }
        assertEquals(0, total(altRowsOf("set5")), "written where the application's session never wrote");
        assertEquals(0, total(rowsOf("set5")));
    }

    @Test
    void theConnectionACommitFoundCommittedTakesIsCheckedForSessionStateAnEarlierCheckoutSet() throws Exception {
        altTable();
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            // One connection per node: after the COMMIT, the session goes on MYDB2's, which an
            // earlier checkout left in alt; a replay of its next transaction would run in public.
            pools = ReplayFixture.throughProxy(proxy, c -> c.setMaximumPoolSize(1));
            AffinityDataSource ds = ReplayFixture.dataSource(pools, "calls-reattach-marked", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB2")).build();
                    Statement s = c.createStatement()) {
                s.execute("SET search_path TO alt");
            }
            Cluster cluster = ds.getCluster();
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "rm1");
                HeldCommit held = commitHeld(proxy, c::commit);
                // Only MYDB2 takes the session after the COMMIT.
                cluster.setNodeState("MYDB1", NodeState.DOWN);
                cluster.setNodeState("MYDB3", NodeState.DOWN);
                held.hold().release(); // the COMMIT ran; its answer never comes
                assertNull(held.ended().get(60, TimeUnit.SECONDS), "found committed");
                assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("rm1"), "committed once");
                cluster.setNodeState("MYDB1", NodeState.UP);
                cluster.setNodeState("MYDB3", NodeState.UP);
                insert(c, "rm2"); // alt.java_req on MYDB2: the session's search_path there
                endOpenTransactions(2);
                SQLException e = assertThrows(SQLException.class, c::commit, "a replay without the search_path");
                assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), "typed refusal of " + e);
                assertTrue(String.valueOf(refusalText(e)).contains("session state set by SQL text"), refusalText(e));
            }
            assertEquals(0, total(rowsOf("rm2")), "written where the application's session never wrote");
            assertEquals(0, total(altRowsOf("rm2")), "the transaction ended with its connection");
        }
    }

    /** What {@code call} answers within {@code ms} on another thread; fails naming {@code what} if it waits longer. */
    private static <T> T within(long ms, java.util.concurrent.Callable<T> call, String what) throws Exception {
        CompletableFuture<T> f = CompletableFuture.supplyAsync(() -> {
            try {
                return call.call();
            } catch (Exception e) {
                throw new java.util.concurrent.CompletionException(e);
            }
        });
        try {
            return f.get(ms, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            throw new AssertionError(what + ": still waiting after " + ms + " ms for the statement that runs");
        }
    }

    @Test
    void aStatementIsClosedAndAskedFromAnotherThreadWhileItRuns() throws Exception {
        AffinityDataSource ds = ds("calls-close-running");
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            Statement s = c.createStatement();
            c.setAutoCommit(false);
            insert(c, "cr1");
            CompletableFuture<SQLException> sleeping = CompletableFuture.supplyAsync(() -> {
                try {
                    s.execute("SELECT pg_sleep(5)");
                    return null;
                } catch (SQLException e) {
                    return e;
                }
            });
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!running(1, "SELECT pg_sleep(5)")) {
                assertTrue(System.nanoTime() < until, "the statement runs on MYDB1");
                Thread.sleep(20);
            }
            // A watchdog's questions are answered at once, whatever runs.
            assertEquals(Boolean.FALSE, within(1000, s::isClosed, "Statement.isClosed()"));
            assertEquals(Boolean.FALSE, within(1000, c::isClosed, "Connection.isClosed()"));
            // isValid(1): JDBC's timeout bounds it; the connection is busy past it, so not verified.
            assertEquals(Boolean.FALSE, within(2500, () -> c.isValid(1), "Connection.isValid(1)"));
            // JDBC: another thread closes a statement to stop it: cancelled, then closed.
            long t0 = System.nanoTime();
            within(2000, () -> {
                s.close();
                return null;
            }, "Statement.close()");
            SQLException e = sleeping.get(2, TimeUnit.SECONDS);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(ms < 2000, "stopped after " + ms + " ms");
            assertEquals("57014", e.getSQLState(), String.valueOf(e));
            assertEquals(Refusal.NOT_RECOVERABLE, refusalOf(e), "the application's error: " + e);
            assertTrue(s.isClosed());
            assertTrue(c.isValid(1), "an idle connection is checked");
            c.rollback();
            insert(c, "cr2");
            c.commit();
        }
        assertEquals(0, total(rowsOf("cr1")), "rolled back");
        assertEquals(1, total(rowsOf("cr2")), "the connection goes on after the close");
    }

    /**
     * On {@code c} (MYDB1, through {@code proxy}), whose session set its search_path to alt by SQL text:
     * a transaction writing {@code id} whose COMMIT reply is lost; what commit() threw, or null.
     */
    private static SQLException commitFoundCommittedAfterSetBySql(FaultProxy proxy, Connection c, String id)
            throws Exception {
        try (Statement s = c.createStatement()) {
            s.execute("SET search_path TO alt"); // the session's, in no record
        }
        c.setAutoCommit(false);
        insert(c, id); // alt.java_req
        Hold hold = proxy.holdNextCommitReply();
        CompletableFuture<SQLException> committing = CompletableFuture.supplyAsync(() -> {
            try {
                c.commit();
                return null;
            } catch (SQLException e) {
                return e;
            }
        });
        assertTrue(hold.withheld.await(30, TimeUnit.SECONDS), "the COMMIT reached the server");
        hold.release(); // the COMMIT ran; its answer never comes
        try {
            return committing.get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            throw new AssertionError("commit() of a COMMIT found committed threw " + e.getCause(), e.getCause());
        }
    }

    @Test
    void aCommitFoundCommittedOnASessionThatSetStateBySqlReturns() throws Exception {
        altTable();
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = ReplayFixture.throughProxy(proxy, c -> {});
            AffinityDataSource ds = ReplayFixture.dataSource(pools, "calls-committed-session", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                SQLException e = commitFoundCommittedAfterSetBySql(proxy, c, "sc1");
                assertNull(e, "commit() of a COMMIT found committed failed: " + e);
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), altRowsOf("sc1"), "committed once");
            // A rollback whose connection failed, on such a session: rolled back, as it asked.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB2")).build()) {
                try (Statement s = c.createStatement()) {
                    s.execute("SET search_path TO alt");
                }
                c.setAutoCommit(false);
                insert(c, "sc2");
                endOpenTransactions(2);
                try {
                    c.rollback();
                } catch (RuntimeException e) {
                    throw new AssertionError("rollback() threw " + e, e);
                }
            }
            assertEquals(0, total(altRowsOf("sc2")) + total(rowsOf("sc2")), "rolled back");
        }
    }

    @Test
    void aSessionWithStateSetBySqlNeverGoesOnWithoutItAfterItsCommitIsFoundCommitted() throws Exception {
        altTable();
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = ReplayFixture.throughProxy(proxy, c -> {});
            AffinityDataSource ds = ReplayFixture.dataSource(pools, "calls-reattach-session", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                SQLException e = commitFoundCommittedAfterSetBySql(proxy, c, "ss1");
                assertNull(e, "commit() of a COMMIT found committed failed: " + e);
                // The session's node connection is gone, and its search_path with it: the next
                // transaction must not run on a connection without it.
                SQLException next = assertThrows(SQLException.class, () -> {
                    insert(c, "ss2");
                    c.commit();
                }, "the session went on without its search_path");
                assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(next), "typed: " + next);
                assertTrue(String.valueOf(refusalText(next)).contains("session state set by SQL text"),
                        refusalText(next));
                assertTrue(c.isClosed(), "the session ended with its node connection");
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), altRowsOf("ss1"), "committed once");
            assertEquals(0, total(rowsOf("ss2")), "written where the application's session never wrote");
            assertEquals(0, total(altRowsOf("ss2")));
            // The COMMIT of setAutoCommit(true) likewise: it returns, and the session ends.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                try (Statement s = c.createStatement()) {
                    s.execute("SET search_path TO alt");
                }
                c.setAutoCommit(false);
                insert(c, "ss3");
                Hold hold = proxy.holdNextCommitReply();
                CompletableFuture<Throwable> switching = CompletableFuture.supplyAsync(() -> {
                    try {
                        c.setAutoCommit(true); // JDBC: commits the transaction
                        return null;
                    } catch (SQLException | RuntimeException e) {
                        return e;
                    }
                });
                assertTrue(hold.withheld.await(30, TimeUnit.SECONDS), "the COMMIT reached the server");
                hold.release();
                Throwable e = switching.get(60, TimeUnit.SECONDS);
                assertNull(e, "setAutoCommit(true) whose COMMIT was found committed failed: " + e);
                assertTrue(c.isClosed(), "the session ended with its node connection");
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), altRowsOf("ss3"), "committed once");
            assertEquals(0, ds.getReplayCounts().refused(Refusal.NOT_REPLAYABLE), String.valueOf(ds.getReplayCounts()));
            ds.getCluster().nodeMetrics().forEach(m -> assertEquals(0, m.inFlight(), m.name() + ": leases released"));
        }
    }

    @Test
    void aStatementClosedFromAnotherThreadIsClosedThoughItsDriverRefusesTheCancel() throws Exception {
        pools = new Pools(NAMES, c -> {});
        Map<String, javax.sql.DataSource> nodes = new java.util.LinkedHashMap<>();
        for (String name : NAMES) {
            javax.sql.DataSource h = pools.get(name);
            nodes.put(name, io.racaffinity.test.Stubs.proxy(javax.sql.DataSource.class, name, (p, m, a) -> {
                Object r = io.racaffinity.test.Stubs.forward(h, m, a);
                if (!(r instanceof Connection c)) {
                    return r;
                }
                return io.racaffinity.test.Stubs.proxy(Connection.class, "Connection[" + name + "]", (p2, m2, a2) -> {
                    Object r2 = io.racaffinity.test.Stubs.forward(c, m2, a2);
                    if (!m2.getName().equals("createStatement")) {
                        return r2;
                    }
                    Statement st = (Statement) r2;
                    // A driver whose cancel fails (a cancel request it cannot send).
                    return io.racaffinity.test.Stubs.proxy(Statement.class, "Statement", (p3, m3, a3) -> {
                        if (m3.getName().equals("cancel")) {
                            throw new SQLException("cancel refused", "HY000");
                        }
                        return io.racaffinity.test.Stubs.forward(st, m3, a3);
                    });
                });
            }));
        }
        AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "calls-close-cancel-refused", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            Statement s = c.createStatement();
            CompletableFuture<SQLException> sleeping = CompletableFuture.supplyAsync(() -> {
                try {
                    s.execute("SELECT pg_sleep(2)");
                    return null;
                } catch (SQLException e) {
                    return e;
                }
            });
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!running(1, "SELECT pg_sleep(2)")) {
                assertTrue(System.nanoTime() < until, "the statement runs on MYDB1");
                Thread.sleep(20);
            }
            // The close the application asked for happens, cancel or not (then once the statement ended).
            SQLException closing = within(10_000, () -> {
                try {
                    s.close();
                    return null;
                } catch (SQLException e) {
                    return e;
                }
            }, "Statement.close()");
            assertNull(closing, "close() failed: " + closing);
            assertNull(sleeping.get(10, TimeUnit.SECONDS), "the statement ran to its end");
            assertTrue(s.isClosed(), "closed");
        }
    }

    @Test
    void aConnectionIsNotClosedWhileItsRecoveryRuns() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = ReplayFixture.throughProxy(proxy, c -> {});
            CountDownLatch checking = new CountDownLatch(1);
            java.util.concurrent.atomic.AtomicBoolean slow = new java.util.concurrent.atomic.AtomicBoolean();
            Map<String, javax.sql.DataSource> nodes = new java.util.LinkedHashMap<>(pools.asMap());
            javax.sql.DataSource first = pools.get("MYDB1");
            // The outcome check's connection to MYDB1 takes a while: the recovery is under way meanwhile.
            nodes.put("MYDB1", io.racaffinity.test.Stubs.proxy(javax.sql.DataSource.class, "SlowMYDB1", (p, m, a) -> {
                if (m.getName().equals("getConnection") && slow.get()) {
                    checking.countDown();
                    Thread.sleep(1000);
                }
                return io.racaffinity.test.Stubs.forward(first, m, a);
            }));
            AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "calls-closed-recovering", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "cw1");
                Hold hold = proxy.holdNextCommitReply();
                CompletableFuture<SQLException> committing = CompletableFuture.supplyAsync(() -> {
                    try {
                        c.commit();
                        return null;
                    } catch (SQLException e) {
                        return e;
                    }
                });
                assertTrue(hold.withheld.await(30, TimeUnit.SECONDS), "the COMMIT reached the server");
                slow.set(true);
                hold.release(); // the COMMIT ran; its answer never comes
                assertTrue(checking.await(30, TimeUnit.SECONDS), "the outcome is being checked");
                // A watchdog asks meanwhile: the connection goes on once the check answers.
                assertEquals(Boolean.FALSE, within(1000, c::isClosed, "Connection.isClosed()"),
                        "closed while its COMMIT's outcome was being checked");
                assertNull(committing.get(60, TimeUnit.SECONDS), "found committed");
                assertTrue(!c.isClosed());
                slow.set(false);
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("cw1"), "committed once");
        }
    }
}
