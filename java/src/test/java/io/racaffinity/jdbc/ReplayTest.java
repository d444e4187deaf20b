package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.AffinityDataSourceTest.portOf;
import static io.racaffinity.jdbc.ReplayConnection.refusalOf;
import static io.racaffinity.jdbc.ReplayFixture.NAMES;
import static io.racaffinity.jdbc.ReplayFixture.backendPid;
import static io.racaffinity.jdbc.ReplayFixture.commitThenKill;
import static io.racaffinity.jdbc.ReplayFixture.count;
import static io.racaffinity.jdbc.ReplayFixture.insert;
import static io.racaffinity.jdbc.ReplayFixture.rowsOf;
import static io.racaffinity.jdbc.ReplayFixture.terminate;
import static io.racaffinity.jdbc.ReplayFixture.throughProxy;
import static io.racaffinity.jdbc.ReplayFixture.total;
import static io.racaffinity.test.Pools.serverPort;
import static io.racaffinity.test.Stubs.forward;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Continuity;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.ReplayCounts;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.testsupport.FaultProxy;
import io.racaffinity.testsupport.FaultProxy.Hold;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * Request replay in {@link AffinityDataSource} (docs/continuity.md, "Java") on real nodes: a
 * request a node's crash interrupted is replayed once elsewhere; a COMMIT whose answer was lost is
 * checked and not replayed; a commit whose outcome cannot be known is never replayed blind; the
 * application's own errors and differing answers are never replayed. Exactly once is checked by
 * SQL on every node.
 */
class ReplayTest extends ReplayNodes {
    @Test
    void aRequestWhoseNodeIsKilledMidRequestIsReplayedOnceElsewhere() throws Exception {
        pools = new Pools(NAMES, c -> c.setConnectionTimeout(2000));
        try {
            AffinityDataSource ds = ds("replay-kill", true);
            ShardingKey key2 = keyOn(ds, "MYDB2");
            try (Connection c = ds.createConnectionBuilder().shardingKey(key2).build()) {
                // (no inet_server_port() here: the replay elsewhere would answer another port, and be abandoned)
                c.setAutoCommit(false);
                insert(c, "k1");
                assertEquals(1, count(c, "k1%"), "read by the application, compared on the replay");

                PgNodes.kill(2);
                ds.applyEvent(FastFailoverTest.fan("MYDB2", "status=down reason=FAILURE"));

                insert(c, "k1b"); // fails on node 2: replayed with what came before, elsewhere
                assertEquals(2, count(c, "k1%"));
                c.commit();
                assertNotEquals(portOf("MYDB2"), serverPort(c));
            }
            PgNodes.restart(2);
            Map<String, Integer> k1 = rowsOf("k1");
            assertEquals(1, total(k1), "exactly once: " + k1);
            assertEquals(0, k1.get("MYDB2"));
            assertEquals(k1, rowsOf("k1b"), "both on the replay's node");

            // Control: the same without replay surfaces the failure and commits nothing.
            AffinityDataSource off = ds("replay-off", false);
            ShardingKey key2off = keyOn(off, "MYDB2");
            Connection c = off.createConnectionBuilder().shardingKey(key2off).build();
            c.setAutoCommit(false);
            insert(c, "k2");
            PgNodes.kill(2);
            off.applyEvent(FastFailoverTest.fan("MYDB2", "status=down reason=FAILURE"));
            SQLException e = assertThrows(SQLException.class, () -> insert(c, "k2b"));
            assertEquals(Continuity.ErrorClass.RECOVERABLE, Continuity.classifySqlState(e.getSQLState()),
                    e.getSQLState());
            c.close();
        } finally {
            PgNodes.restart(2);
        }
        assertEquals(0, total(rowsOf("k2")));
    }

    @Test
    void aLostCommitReplyIsFoundCommittedAndNotReplayed() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("replay-lost-commit", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "c1");
                Hold lost = proxy.loseNextCommitReply();
                c.commit(); // the answer is lost; the outcome check finds it committed
                assertTrue(lost.acted(), "the reply was lost");
                // The connection goes on, on a connection routed anew.
                insert(c, "c1-next");
                c.commit();
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("c1"));
            assertEquals(1, total(rowsOf("c1-next")));
        }
    }

    /**
     * The outcome check tests each pooled connection with isValid; a driver (or a wrapper) whose isValid throws a
     * RuntimeException must cost that connection, not leak it: the check's connection was never closed nor
     * evicted, so each check held one of the node pool's connections for good.
     */
    @Test
    void anOutcomeCheckWhoseIsValidThrowsGivesItsConnectionBack() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> {});
            AtomicBoolean broken = new AtomicBoolean();
            Map<String, DataSource> nodes = pools.asMap();
            nodes.put("MYDB1", isValidThrowing(nodes.get("MYDB1"), broken));
            AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "replay-isvalid-throws", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "v1");
                Hold lost = proxy.loseNextCommitReply();
                broken.set(true);
                SQLException e = assertThrows(SQLException.class, c::commit, "no outcome: the check could not ask");
                assertTrue(lost.acted(), "the reply was lost");
                assertEquals(Refusal.OUTCOME_UNKNOWN, refusalOf(e), String.valueOf(e));
            }
            com.zaxxer.hikari.HikariPoolMXBean pool = pools.get("MYDB1").getHikariPoolMXBean();
            assertTrue(Pools.await(java.time.Duration.ofSeconds(5), () -> pool.getActiveConnections() == 0),
                    "MYDB1's pool connections still borrowed after the request: " + pool.getActiveConnections());
        }
    }

    /**
     * An abort() (from any thread: it takes no lock) that lands while a replay sets up its new connection: the
     * application ended the connection, so the replayed COMMIT must not run, and the new connection, which
     * close() will never see (the connection is closed already), must go back to its pool.
     */
    @Test
    void anAbortDuringAReplayStopsTheReplayedCommitAndGivesItsConnectionBack() throws Exception {
        pools = new Pools(NAMES, c -> c.setConnectionTimeout(2000));
        java.util.concurrent.atomic.AtomicReference<Connection> app = new java.util.concurrent.atomic.AtomicReference<>();
        AtomicBoolean armed = new AtomicBoolean();
        Map<String, DataSource> nodes = pools.asMap();
        nodes.replaceAll((name, pool) -> abortingOnFirstStatement(pool, armed, app));
        AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "replay-abort", true);
        Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
        app.set(c);
        try {
            c.setAutoCommit(false);
            insert(c, "ab1");
            // The request's backend ends (57P01 at the commit's first statement): replayed elsewhere.
            terminateIdleInTransaction(1);
            armed.set(true);
            SQLException e = assertThrows(SQLException.class, c::commit, "the application aborted the connection");
            assertFalse(armed.get(), "the abort came as the replay set its connection up");
            assertTrue(c.isClosed(), String.valueOf(e));
        } finally {
            c.close();
        }
        assertEquals(0, total(rowsOf("ab1")), "the aborted request committed nowhere: " + rowsOf("ab1"));
        for (String n : NAMES) {
            com.zaxxer.hikari.HikariPoolMXBean pool = pools.get(n).getHikariPoolMXBean();
            assertTrue(Pools.await(java.time.Duration.ofSeconds(5), () -> pool.getActiveConnections() == 0),
                    n + "'s pool connections still borrowed after the abort: " + pool.getActiveConnections());
        }
    }

    /** Ends node {@code i}'s client backends that are idle in a transaction (the request's). */
    private static void terminateIdleInTransaction(int i) throws SQLException {
        try (Connection admin = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                Statement s = admin.createStatement();
                ResultSet rs = s.executeQuery("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                        + " WHERE state = 'idle in transaction' AND pid <> pg_backend_pid()")) {
            rs.next();
            assertEquals(1, rs.getInt(1), "the request's backend");
        }
    }

    /**
     * {@code pool}; a connection taken from it once {@code armed} (the replay's) aborts the application's
     * connection {@code app} at its first prepareStatement, as another thread's abort() would land then.
     */
    private static DataSource abortingOnFirstStatement(DataSource pool, AtomicBoolean armed,
            java.util.concurrent.atomic.AtomicReference<Connection> app) {
        return io.racaffinity.test.Stubs.proxy(DataSource.class, "Aborting[" + pool + "]", (p, m, args) -> {
            Object r = forward(pool, m, args);
            if (!(r instanceof Connection physical) || !armed.get()) {
                return r;
            }
            AtomicBoolean fired = new AtomicBoolean();
            return io.racaffinity.test.Stubs.proxy(Connection.class, "Aborting[" + physical + "]", (cp, cm, cargs) -> {
                if (cm.getName().equals("prepareStatement") && armed.get() && fired.compareAndSet(false, true)) {
                    armed.set(false);
                    app.get().abort(Runnable::run);
                }
                return forward(physical, cm, cargs);
            });
        });
    }

    /** {@code pool}, whose connections' isValid throws an IllegalStateException while {@code broken}. */
    private static DataSource isValidThrowing(DataSource pool, AtomicBoolean broken) {
        return io.racaffinity.test.Stubs.proxy(DataSource.class, "IsValidThrows[" + pool + "]", (p, m, args) -> {
            Object r = forward(pool, m, args);
            if (!(r instanceof Connection physical)) {
                return r;
            }
            return io.racaffinity.test.Stubs.proxy(Connection.class, "IsValidThrows[" + physical + "]",
                    (cp, cm, cargs) -> {
                        if (cm.getName().equals("isValid") && broken.get()) {
                            throw new IllegalStateException("a driver bug in isValid");
                        }
                        return forward(physical, cm, cargs);
                    });
        });
    }

    @Test
    void aCommitWhoseNodeDiesBeforeItsOutcomeIsKnownIsNeverReplayedBlind() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> c.setConnectionTimeout(1000));
            AffinityDataSource ds = ds("replay-unknown", true);
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            try {
                c.setAutoCommit(false);
                insert(c, "u1");
                // committed, and then no one can tell
                SQLException e = commitThenKill(c, proxy, 1).error();
                assertInstanceOf(SQLException.class, e, "the original error surfaces");
                assertEquals(Refusal.OUTCOME_UNKNOWN, refusalOf(e), String.valueOf(e));
            } finally {
                c.close();
                PgNodes.restart(1);
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("u1"), "committed once, never twice");
        }
    }

    /**
     * The next transaction id node {@code i} will assign, read from a session of its own without
     * assigning one: a snapshot's xmax is one past the last transaction that ended, and every
     * request here has ended when it is read.
     */
    private static long nextXid(int i) throws SQLException {
        try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")) {
            rs.next();
            return rs.getLong(1);
        }
    }

    @Test
    void aReadOnlyRequestIsGivenNoTransactionId() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("replay-read-only", true);
        ShardingKey key3 = keyOn(ds, "MYDB3");
        long before = nextXid(3);
        int requests = 20;
        for (int i = 0; i < requests; i++) {
            try (Connection c = ds.createConnectionBuilder().shardingKey(key3).build()) {
                c.setAutoCommit(false);
                assertEquals(0, count(c, "ro%"));
                c.commit();
            }
        }
        // One xid per request would be 20 (and a commit record each); nothing else on the node takes
        // xids, the margin is for an autovacuum that might.
        long used = nextXid(3) - before;
        assertTrue(used <= 2, requests + " read-only requests took " + used + " transaction ids");

        // Control: the observable moves for a request that writes.
        before = nextXid(3);
        try (Connection c = ds.createConnectionBuilder().shardingKey(key3).build()) {
            c.setAutoCommit(false);
            insert(c, "w1");
            c.commit();
        }
        assertTrue(nextXid(3) - before >= 1, "a writing request takes its xid");
    }

    @Test
    void aReadOnlyRequestWhoseCommitReplyIsLostWithItsNodeDownIsReplayedElsewhere() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> c.setConnectionTimeout(1000));
            AffinityDataSource ds = ds("replay-read-only-lost", true);
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            try {
                c.setAutoCommit(false);
                assertEquals(0, count(c, "ro%"), "read by the application, compared on the replay");
                // no one can tell its outcome, and a read-only transaction has none to tell
                SQLException e = commitThenKill(c, proxy, 1).error();
                assertEquals(null, e, "replayed elsewhere, refused " + (e == null ? null : refusalOf(e)));
                assertNotEquals(portOf("MYDB1"), serverPort(c));
            } finally {
                c.close();
                PgNodes.restart(1);
            }
        }
    }

    @Test
    void aRepeatedTextCrossesToTheLibraryOnceAndTheKeptTextsStayBounded() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("replay-controls", true);
        String sql = "SELECT count(*) FROM java_req WHERE id = 'controls-" + System.nanoTime() + "'";
        long before = ReplayConnection.controlReads();
        try (Connection c = ds.getConnection()) {
            c.setAutoCommit(false);
            for (int i = 0; i < 20; i++) {
                try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
                    rs.next();
                }
            }
            c.commit();
        }
        assertEquals(1, ReplayConnection.controlReads() - before, "the same text crossed JNI each time");
        for (int i = 0; i < 3 * ReplayConnection.CONTROLS_MAX; i++) {
            assertEquals(Continuity.TransactionControl.NONE, ReplayConnection.transactionControl("SELECT " + i));
            assertTrue(ReplayConnection.cachedControls() <= ReplayConnection.CONTROLS_MAX,
                    ReplayConnection.cachedControls() + " texts kept");
        }
        assertTrue(ReplayConnection.cachedControls() > 0, "nothing kept");
        String longText = "COMMIT -- " + "x".repeat(ReplayConnection.CONTROL_TEXT_MAX);
        before = ReplayConnection.controlReads();
        for (int i = 0; i < 2; i++) {
            assertEquals(Continuity.TransactionControl.COMMIT, ReplayConnection.transactionControl(longText));
        }
        assertEquals(2, ReplayConnection.controlReads() - before, "a text longer than the bound is not kept");
    }

    @Test
    void aStatementReusedOverManyTransactionsKeepsTheRecordBounded() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("replay-bounded", true);
        try (Connection c = ds.getConnection()) {
            c.setAutoCommit(false);
            int after1 = 0;
            try (PreparedStatement s = c.prepareStatement("INSERT INTO java_req VALUES (?)")) {
                for (int i = 0; i < 50; i++) {
                    s.setString(1, "b" + i);
                    s.executeUpdate();
                    c.commit();
                    if (i == 0) {
                        after1 = ReplayConnection.recordedCalls(c);
                    }
                }
                assertEquals(after1, ReplayConnection.recordedCalls(c), "as after the first transaction");
            }
            // In auto-commit mode each statement is its own transaction: nothing of it stays.
            c.setAutoCommit(true);
            for (int i = 0; i < 10; i++) {
                count(c, "b%");
            }
            int after10 = ReplayConnection.recordedCalls(c);
            for (int i = 0; i < 10; i++) {
                count(c, "b%");
            }
            assertEquals(after10, ReplayConnection.recordedCalls(c), "the last statement's calls only");
        }
    }

    @Test
    void theApplicationsErrorsAndDifferingAnswersAreNeverReplayed() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("replay-refusals", true);
        try (Connection admin = DriverManager.getConnection(PgNodes.url(1), "postgres", "")) {
            insert(admin, "only-on-1");
        }
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            SQLException dup = assertThrows(SQLException.class, () -> insert(c, "only-on-1"));
            assertEquals("23505", dup.getSQLState());
            assertEquals(Refusal.NOT_RECOVERABLE, refusalOf(dup));
            c.rollback();
            // A COMMIT of a transaction an error aborted: the driver's answer (pgjdbc: a silent
            // rollback), and the transaction is over; nothing of it is replayed later.
            insert(c, "gone");
            assertThrows(SQLException.class, () -> insert(c, "only-on-1"));
            c.commit();
            // the connection goes on
            assertEquals(1, count(c, "only-on-%"), "read by the application");
            insert(c, "r5");
            terminate("MYDB1", backendPid(c));
            // the replay elsewhere reads 0 where the application read 1: abandoned
            SQLException lost = assertThrows(SQLException.class, () -> insert(c, "r5b"));
            assertEquals(Refusal.RESULTS_DIFFER, refusalOf(lost), String.valueOf(lost));
            assertTrue(Continuity.classifySqlState(lost.getSQLState()) == Continuity.ErrorClass.RECOVERABLE,
                    lost.getSQLState());
        }
        assertEquals(0, total(rowsOf("r5")));
        assertEquals(0, total(rowsOf("gone")), "rolled back, never replayed");
        assertEquals(0, total(rowsOf("r5b")));
    }

    /** Rows with id {@code id} in node 1's database (the RAC model's one database). */
    static int rowsInDatabase(String id) throws SQLException {
        return rowsOf(id).get("MYDB1");
    }

    @Test
    void inOneDatabaseACommitLostInABlackholeIsForcedThroughAnotherInstanceThenReplayed() throws Exception {
        List<String> instances = List.of("INST1", "INST2", "INST3");
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            // Three instances of one database (node 1): INST1 through the proxy.
            pools = new Pools(instances, c -> c.setJdbcUrl(c.getPoolName().endsWith("INST1") ? proxy.url()
                    : PgNodes.url(1)));
            AffinityDataSource ds = pools.affinity("name = replay-rac; nodes = INST1, INST2, INST3;"
                    + " policy = random; thread.auto_pin = false; recovery.scope = database");
            ds.setRegisterMBean(false);
            ds.setReplay(true);
            ds.setHeartbeatTimeoutSeconds(2);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "INST1")).build()) {
                c.setAutoCommit(false);
                insert(c, "rac1");
                // The COMMIT never arrives; the transaction stays in progress.
                Hold swallowed = proxy.swallowNextCommit();
                c.commit(); // in progress -> ended through INST2/3 -> aborted -> replayed there, once
                assertTrue(swallowed.acted());
            }
            assertEquals(1, rowsInDatabase("rac1"), "committed exactly once");
            ReplayCounts counts = ds.getReplayCounts();
            assertEquals(List.of(1L, 0L, 0L, 1L), List.of(counts.replayed(), counts.committedAlready(),
                    counts.refusedTotal(), counts.outcomesForced()), "replayed, after forcing its outcome: " + counts);
            assertEquals(2, counts.outcomeChecks(), "in progress, then aborted: " + counts);

            // A lost answer, the instance then gone: another instance knows it committed.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "INST1")).build()) {
                c.setAutoCommit(false);
                insert(c, "rac2");
                Hold lost = proxy.loseNextCommitReply();
                c.commit();
                assertTrue(lost.acted(), "the reply was lost");
            }
            assertEquals(1, rowsInDatabase("rac2"), "committed exactly once");
            assertEquals(1, counts.committedAlready(), "found committed: " + counts);
            assertEquals(List.of(1L, 0L, 1L, 3L), List.of(counts.replayed(), counts.refusedTotal(),
                    counts.outcomesForced(), counts.outcomeChecks()), "only one check more: " + counts);
        }
    }

    @Test
    void aStatementThatFailsInAutoCommitModeIsNeverReplayedNorTakenForAnEarlierCommit() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("replay-autocommit", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB3")).build()) {
            c.setAutoCommit(false);
            insert(c, "t1");
            c.commit(); // its xid committed
            c.setAutoCommit(true);
            insert(c, "a1");
            terminate("MYDB3", backendPid(c));
            SQLException e = assertThrows(SQLException.class, () -> insert(c, "a2"));
            assertEquals(Refusal.OUTCOME_UNKNOWN, refusalOf(e), String.valueOf(e));
        }
        assertEquals(1, total(rowsOf("t1")));
        assertEquals(1, total(rowsOf("a1")));
        assertEquals(0, total(rowsOf("a2")));
    }
}
