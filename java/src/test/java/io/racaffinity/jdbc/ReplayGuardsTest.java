package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.ReplayConnection.refusalOf;
import static io.racaffinity.jdbc.ReplayFixture.NAMES;
import static io.racaffinity.jdbc.ReplayFixture.commitHeld;
import static io.racaffinity.jdbc.ReplayFixture.count;
import static io.racaffinity.jdbc.ReplayFixture.endOpenTransactions;
import static io.racaffinity.jdbc.ReplayFixture.failingOnce;
import static io.racaffinity.jdbc.ReplayFixture.insert;
import static io.racaffinity.jdbc.ReplayFixture.rowsOf;
import static io.racaffinity.jdbc.ReplayFixture.throughProxy;
import static io.racaffinity.jdbc.ReplayFixture.total;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.Continuity;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.Continuity.TransactionControl;
import io.racaffinity.jdbc.ReplayFixture.HeldCommit;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.testsupport.FaultProxy;
import io.racaffinity.testsupport.FaultProxy.Hold;
import java.io.Reader;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Request replay's guards on real nodes (docs/continuity.md, "Java"): every way a transaction
 * ends has its outcome guarded like {@code commit()}'s, a rollback's failure replays nothing of
 * what it rolled back, a replay that reads other values than the application read is abandoned
 * whatever those values are, nothing reached through the proxies escapes the record, and the
 * record keeps only what sets the session up. Exactly once is checked by SQL on every node.
 */
class ReplayGuardsTest extends ReplayNodes {
    private static void onEveryNode(String... sql) throws SQLException {
        for (int i = 1; i <= 3; i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    Statement s = c.createStatement()) {
                for (String q : sql) {
                    s.execute(q.replace("$NODE", Integer.toString(i)));
                }
            }
        }
    }

    // ---- 1. every way a transaction ends -------------------------------------------------------

    @Test
    void aTransactionEndedBySetAutoCommitWhoseReplyIsLostIsCheckedNotReplayedBlind() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("guard-autocommit-on", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "ac1");
                Hold lost = proxy.loseNextCommitReply();
                c.setAutoCommit(true); // JDBC: commits the transaction
                assertTrue(lost.acted(), "the reply was lost");
                assertTrue(c.getAutoCommit());
                insert(c, "ac1-next"); // auto-commit: its own transaction
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("ac1"), "committed once, where it ran");
            assertEquals(1, total(rowsOf("ac1-next")));
            assertEquals(1, ds.getReplayCounts().committedAlready(), String.valueOf(ds.getReplayCounts()));
        }
    }

    @Test
    void aTransactionEndedBySqlTextIsNeverReplayed() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("guard-sql-commit", true);
            List<String> ends = List.of("COMMIT", "end", "  /* the end */ COMMIT AND CHAIN", "-- done\ncommit work;");
            for (int i = 0; i < ends.size(); i++) {
                String id = "sql" + i;
                Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                try {
                    c.setAutoCommit(false);
                    insert(c, id);
                    Hold lost = proxy.loseNextCommitReply();
                    try (Statement s = c.createStatement()) {
                        String sql = ends.get(i);
                        SQLException e = assertThrows(SQLException.class, () -> s.execute(sql),
                                sql + ": a lost reply of a COMMIT sent as SQL surfaces");
                        assertEquals(Refusal.OUTCOME_UNKNOWN, refusalOf(e), sql + ": " + e);
                    }
                    assertTrue(lost.acted(), "the reply was lost");
                } finally {
                    c.close();
                }
                assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf(id), ends.get(i) + ": committed once");
            }
            // Transaction control sent as SQL without a failure: the request goes on, not replayable.
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "sql-ok");
                try (Statement s = c.createStatement()) {
                    s.execute("COMMIT");
                }
                insert(c, "sql-ok-next");
                endOpenTransactions(1);
                SQLException e = assertThrows(SQLException.class, c::commit);
                assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), String.valueOf(e));
            }
            assertEquals(1, total(rowsOf("sql-ok")));
            assertEquals(0, total(rowsOf("sql-ok-next")), "never replayed");
        }
    }

    @Test
    void savepointsSentAsSqlLeaveTheRequestReplayable() throws Exception {
        // The transaction goes on after them, and a replay runs them again in order: the same
        // reading as Python's (the core's TransactionControl).
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-savepoint", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.execute("SAVEPOINT s");
            }
            insert(c, "sp-undone");
            try (Statement s = c.createStatement()) {
                s.execute("ROLLBACK TO SAVEPOINT s");
                s.execute("release s");
            }
            insert(c, "sp-kept");
            endOpenTransactions(1);
            c.commit(); // its connection is gone: replayed elsewhere, savepoints and all
        }
        assertEquals(0, total(rowsOf("sp-undone")), "rolled back to the savepoint: " + rowsOf("sp-undone"));
        assertEquals(1, total(rowsOf("sp-kept")), String.valueOf(rowsOf("sp-kept")));
        assertEquals(0, rowsOf("sp-kept").get("MYDB1"), "the first node's transaction ended uncommitted");
        assertEquals(1, ds.getReplayCounts().replayed(), String.valueOf(ds.getReplayCounts()));
    }

    /** How a transaction an error aborted loses its connection. */
    enum LostAt {
        /** At a later statement: its backend ended. */
        STATEMENT,
        /** At its COMMIT: its backend ended. */
        COMMIT,
        /** At its COMMIT, which never reaches the server: its connection reset. */
        COMMIT_LOST,
        /** At its COMMIT, after a later statement's 25P02 the application caught too: its backend ended. */
        COMMIT_AFTER_25P02
    }

    @ParameterizedTest
    @EnumSource(LostAt.class)
    void aTransactionAnErrorAbortedIsNeverReplayedIntoACommit(LostAt lostAt) throws Exception {
        // The application caught a unique violation and went on without a ROLLBACK TO SAVEPOINT: its
        // transaction can only roll back (every later statement fails 25P02, its COMMIT rolls back).
        // A replay of the statements that succeeded would commit them elsewhere.
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("guard-aborted-" + lostAt, true);
            String id = "aborted-" + lostAt;
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, id);
                SQLException dup = assertThrows(SQLException.class, () -> insert(c, id));
                assertEquals("23505", dup.getSQLState(), String.valueOf(dup));
                SQLException e;
                switch (lostAt) {
                    case STATEMENT -> {
                        endOpenTransactions(1);
                        e = assertThrows(SQLException.class, () -> count(c, "%"),
                                "a statement of a transaction an error aborted was replayed");
                    }
                    case COMMIT -> {
                        endOpenTransactions(1);
                        e = assertThrows(SQLException.class, c::commit,
                                "a transaction an error aborted was replayed and committed");
                    }
                    case COMMIT_AFTER_25P02 -> {
                        SQLException failed = assertThrows(SQLException.class, () -> count(c, "%"));
                        assertEquals("25P02", failed.getSQLState(), String.valueOf(failed));
                        endOpenTransactions(1);
                        e = assertThrows(SQLException.class, c::commit,
                                "a transaction an error aborted was replayed and committed");
                    }
                    default -> {
                        Hold lost = proxy.swallowNextCommit();
                        e = assertThrows(SQLException.class, c::commit,
                                "a transaction an error aborted was replayed and committed");
                        assertTrue(lost.acted(), "the COMMIT was lost");
                    }
                }
                assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(e), String.valueOf(e));
            }
            assertEquals(0, total(rowsOf(id)), "a transaction an error aborted was committed: " + rowsOf(id));
            assertEquals(1, ds.getReplayCounts().refused(Refusal.NOT_REPLAYABLE), String.valueOf(ds.getReplayCounts()));
        }
    }

    @Test
    void aTransactionRolledBackToASavepointAfterAnErrorIsReplayedAgain() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-aborted-savepoint", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "sp-before");
            try (Statement s = c.createStatement()) {
                s.execute("SAVEPOINT s");
            }
            insert(c, "sp-undone");
            assertEquals("23505", assertThrows(SQLException.class, () -> insert(c, "sp-before")).getSQLState());
            // A second error in the aborted transaction: 25P02.
            assertEquals("25P02", assertThrows(SQLException.class, () -> count(c, "%")).getSQLState());
            try (Statement s = c.createStatement()) {
                s.execute("ROLLBACK TO SAVEPOINT s"); // whole again
            }
            insert(c, "sp-after");
            endOpenTransactions(1);
            c.commit(); // its connection is gone: replayed elsewhere
        }
        assertEquals(1, total(rowsOf("sp-before")), String.valueOf(rowsOf("sp-before")));
        assertEquals(0, total(rowsOf("sp-undone")), String.valueOf(rowsOf("sp-undone")));
        assertEquals(1, total(rowsOf("sp-after")), String.valueOf(rowsOf("sp-after")));
        assertEquals(0, rowsOf("sp-after").get("MYDB1"), "the first node's transaction ended uncommitted");
        assertEquals(1, ds.getReplayCounts().replayed(), String.valueOf(ds.getReplayCounts()));
    }

    @Test
    void aTransactionTheDriversAutosaveKeptWholeAfterAnErrorIsReplayed() throws Exception {
        // pgjdbc's autosave rolls back to its own savepoint at the error: the transaction goes on
        // and commits what succeeded, and so does its replay.
        pools = new Pools(NAMES, c -> c.addDataSourceProperty("autosave", "always"));
        AffinityDataSource ds = ds("guard-autosave", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "autosave");
            assertEquals("23505", assertThrows(SQLException.class, () -> insert(c, "autosave")).getSQLState());
            assertEquals(1, count(c, "autosave"), "the transaction goes on");
            endOpenTransactions(1);
            c.commit(); // its connection is gone: replayed elsewhere
        }
        assertEquals(1, total(rowsOf("autosave")), String.valueOf(rowsOf("autosave")));
        assertEquals(0, rowsOf("autosave").get("MYDB1"), "the first node's transaction ended uncommitted");
        assertEquals(1, ds.getReplayCounts().replayed(), String.valueOf(ds.getReplayCounts()));
    }

    @Test
    void transactionControlIsFoundInSqlTextNotInItsData() {
        // The core's reading (its table test is rust/core/src/continuity/transaction_control.rs);
        // here each answer crosses JNI, with text only Java strings hold.
        Map<String, TransactionControl> cases = new java.util.LinkedHashMap<>();
        cases.put("SAVEPOINT a; INSERT INTO t VALUES (1); COMMIT", TransactionControl.COMMIT);
        cases.put("ROLLBACK; BEGIN", TransactionControl.ROLLBACK);
        cases.put("START TRANSACTION ISOLATION LEVEL SERIALIZABLE", TransactionControl.BEGIN);
        cases.put("rollback to savepoint a", TransactionControl.SAVEPOINT);
        cases.put("SELECT 'COMMIT'; SELECT \"end\" FROM t", TransactionControl.NONE);
        cases.put("SELECT E'it\\'s; COMMIT' ", TransactionControl.NONE);
        cases.put("DO $$ BEGIN PERFORM 1; END $$", TransactionControl.NONE);
        cases.put("SELECT '\ud800 \u0000 \uD83D\uDE00'; commit", TransactionControl.COMMIT);
        cases.forEach((sql, want) -> assertEquals(want, Continuity.transactionControl(sql), sql));
        assertThrows(NullPointerException.class, () -> Continuity.transactionControl(null));
    }

    @Test
    void sessionStateSetBySqlTextIsFoundWithTheControlInOneReading() {
        // The core's reading (its table test is rust/core/src/continuity/session_state.rs).
        assertEquals(new Continuity.SqlReading(TransactionControl.COMMIT, true),
                Continuity.read("SET search_path TO alt; COMMIT"));
        assertEquals(new Continuity.SqlReading(TransactionControl.NONE, true),
                Continuity.read("SELECT '\ud800'; SELECT pg_advisory_lock(1)"));
        assertEquals(new Continuity.SqlReading(TransactionControl.NONE, false),
                Continuity.read("SET LOCAL search_path TO alt; SELECT 'SET ROLE x'"));
        assertTrue(Continuity.setsSessionState("PREPARE q AS SELECT 1"));
        assertThrows(NullPointerException.class, () -> Continuity.read(null));
    }

    // ---- 2. a rollback's failure ---------------------------------------------------------------

    @Test
    void aRollbackThatFailsRecoverablyReplaysNothingItRolledBack() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-rollback", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "rolled-back");
            endOpenTransactions(1);
            c.rollback(); // its connection is gone, with the transaction: goes on elsewhere
            insert(c, "next");
            c.commit();
        }
        assertEquals(0, total(rowsOf("rolled-back")), "rolled back: " + rowsOf("rolled-back"));
        assertEquals(1, total(rowsOf("next")));
    }

    /** A replaying data source of {@link ReplayFixture#NODES} over unpooled connections to the three nodes. */
    private static AffinityDataSource unpooled(String name) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; " + ReplayFixture.NODES);
        Map<String, String> urls = new java.util.LinkedHashMap<>();
        for (int i = 1; i <= 3; i++) {
            urls.put(NAMES.get(i - 1), PgNodes.url(i));
        }
        ds.setNodeUrls(urls);
        ds.setUser("postgres");
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        ds.setReplay(true);
        return ds;
    }

    /**
     * Unpooled nodes: pgjdbc's closed connection answers 08003 (HikariCP's, no SQLState), which the
     * core calls recoverable; a rollback must not take it for a lost connection to go on from.
     */
    @Test
    void aRollbackAfterARefusalFailsAndTakesNoConnection() throws Exception {
        try (AffinityDataSource ds = unpooled("guard-refused-rollback")) {
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            try (c) {
                c.setAutoCommit(false);
                c.getMetaData(); // not replayable from now on
                insert(c, "refused");
                endOpenTransactions(1);
                try {
                    insert(c, "refused-b");
                    fail("replayed although the request used getMetaData");
                } catch (SQLException refused) {
                    assertEquals(Refusal.NOT_REPLAYABLE, refusalOf(refused), String.valueOf(refused));
                    // The application's usual catch: roll back, then close (try-with-resources).
                    SQLException e = assertThrows(SQLException.class, c::rollback, "a rollback of a closed connection");
                    assertEquals("08003", e.getSQLState(), String.valueOf(e));
                }
                assertTrue(c.isClosed());
            }
            SQLException e = assertThrows(SQLException.class, c::getAutoCommit, "a call on a closed connection");
            assertEquals("08003", e.getSQLState(), String.valueOf(e));
            ds.getCluster().nodeMetrics().forEach(m -> assertEquals(0, m.inFlight(),
                    m.name() + ": no connection left open after close"));
        }
        assertEquals(0, total(rowsOf("refused")));
    }

    @Test
    void aStatementOfAClosedConnectionIsClosedAndBeginsNoRecovery() throws Exception {
        try (AffinityDataSource ds = unpooled("guard-closed-statement")) {
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            Statement s = c.createStatement();
            c.close();
            assertTrue(s.isClosed(), "closed with its connection (JDBC)");
            SQLException e = assertThrows(SQLException.class,
                    () -> s.executeUpdate("INSERT INTO java_req VALUES ('after-close')"));
            assertEquals("08003", e.getSQLState(), String.valueOf(e));
            assertEquals(null, refusalOf(e), "a call on a closed connection is no failure to recover from: " + e);
            assertEquals(0, ds.getReplayCounts().refusedTotal(), String.valueOf(ds.getReplayCounts()));
            s.close();
        }
        assertEquals(0, total(rowsOf("after-close")));
    }

    @Test
    void aCommitFoundCommittedAfterAnAbortTakesNoConnection() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("guard-aborted-commit", true);
            Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
            c.setAutoCommit(false);
            insert(c, "aborted-commit");
            HeldCommit held = commitHeld(proxy, c::commit);
            c.abort(Runnable::run); // a watchdog ends the request whose COMMIT hangs
            held.hold().release();
            SQLException e = held.ended().get(60, TimeUnit.SECONDS);
            assertEquals(null, e, "found committed, as it did: " + e);
            assertTrue(c.isClosed());
            c.close();
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("aborted-commit"));
            for (String name : NAMES) {
                HikariDataSource h = pools.get(name);
                assertTrue(Pools.await(Duration.ofSeconds(5),
                        () -> h.getHikariPoolMXBean().getActiveConnections() == 0),
                        name + ": no connection left checked out: active "
                                + h.getHikariPoolMXBean().getActiveConnections());
            }
            ds.getCluster().nodeMetrics().forEach(m -> assertEquals(0, m.inFlight(), m.name() + ": leases released"));
        }
    }

    @Test
    void anAbortWithoutAnExecutorIsRefusedAndTheConnectionStillClosesFully() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-abort-null", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            SQLException e = assertThrows(SQLException.class, () -> c.abort(null), "a null executor is refused (JDBC)");
            assertEquals("HY009", e.getSQLState(), String.valueOf(e));
            assertEquals(0, count(c, "%"), "a refused abort leaves the connection as it was");
        }
        for (String name : NAMES) {
            HikariDataSource h = pools.get(name);
            assertTrue(Pools.await(Duration.ofSeconds(5), () -> h.getHikariPoolMXBean().getActiveConnections() == 0),
                    name + ": the connection went back at close: active "
                            + h.getHikariPoolMXBean().getActiveConnections());
        }
        ds.getCluster().nodeMetrics().forEach(m -> assertEquals(0, m.inFlight(), m.name() + ": leases released"));
    }

    // ---- 3, 4. what a replay compares -----------------------------------------------------------

    /** A request on node 1 reads a value with {@code read}, its backend ends, and it must not be replayed elsewhere. */
    private Refusal readThenFail(AffinityDataSource ds, String id, String query, ReadValue read) throws Exception {
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            Object seen;
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(query)) {
                assertTrue(rs.next());
                seen = read.read(rs);
            }
            endOpenTransactions(1);
            try {
                insert(c, id);
                c.commit();
            } catch (SQLException e) {
                assertEquals(0, total(rowsOf(id)), id + ": refused, nothing committed");
                return refusalOf(e);
            }
            fail(id + ": replayed elsewhere although the application read " + seen + " on MYDB1; rows " + rowsOf(id)
                    + ", replays " + ds.getReplayCounts().replayed());
            return null;
        }
    }

    interface ReadValue {
        Object read(ResultSet rs) throws Exception;
    }

    @Test
    void aReplayThatReadsOtherValuesIsAbandonedWhateverTheirHashCodes() throws Exception {
        // Long.hashCode(0) == Long.hashCode(-1), "Aa".hashCode() == "BB".hashCode()
        onEveryNode("DROP TABLE IF EXISTS java_vals",
                "CREATE TABLE java_vals (k int PRIMARY KEY, n bigint, t text)",
                "INSERT INTO java_vals VALUES (1, CASE WHEN $NODE = 1 THEN 0 ELSE -1 END,"
                        + " CASE WHEN $NODE = 1 THEN 'Aa' ELSE 'BB' END)");
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-digest", true);
        assertEquals(Refusal.RESULTS_DIFFER, readThenFail(ds, "h1", "SELECT n FROM java_vals", rs -> rs.getLong(1)));
        assertEquals(Refusal.RESULTS_DIFFER, readThenFail(ds, "h2", "SELECT t FROM java_vals", rs -> rs.getString(1)));
        assertEquals(Refusal.RESULTS_DIFFER, readThenFail(ds, "h3", "SELECT n FROM java_vals",
                rs -> rs.getObject(1)));
    }

    @Test
    void valuesReadThroughDriverObjectsAreComparedOrMakeTheRequestNotReplayable() throws Exception {
        onEveryNode("DROP TABLE IF EXISTS java_docs",
                "CREATE TABLE java_docs (k int PRIMARY KEY, j jsonb, i interval, a int[], t text, b bytea)",
                "INSERT INTO java_docs VALUES (1, '{\"balance\": $NODE00}', '$NODE days', '{$NODE,$NODE}',"
                        + " 'text of node $NODE', 'bytes of $NODE'::bytea)");
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-objects", true);
        String q = "SELECT j, i, a, t, b FROM java_docs";
        assertEquals(Refusal.RESULTS_DIFFER, readThenFail(ds, "o1", q, rs -> rs.getObject("j")), "jsonb");
        assertEquals(Refusal.RESULTS_DIFFER, readThenFail(ds, "o2", q, rs -> rs.getObject("i")), "interval");
        assertEquals(Refusal.NOT_REPLAYABLE, readThenFail(ds, "o3", q, rs -> rs.getArray("a").getArray()), "array");
        assertEquals(Refusal.NOT_REPLAYABLE, readThenFail(ds, "o4", q, rs -> rs.getObject("a")), "array as object");
        assertEquals(Refusal.NOT_REPLAYABLE, readThenFail(ds, "o5", q, rs -> {
            try (Reader r = rs.getCharacterStream("t")) {
                return r.read();
            }
        }), "character stream");
        assertEquals(Refusal.NOT_REPLAYABLE, readThenFail(ds, "o6", q, rs -> rs.getBinaryStream("b").read()),
                "binary stream");
    }

    /** The bytes of {@code java_bin} row {@code id} on whichever node has it, or null if none. */
    private static byte[] binOf(String id) throws SQLException {
        byte[] found = null;
        for (int i = 1; i <= 3; i++) {
            try (Connection c = DriverManager.getConnection(PgNodes.url(i), "postgres", "");
                    java.sql.PreparedStatement s = c.prepareStatement("SELECT b FROM java_bin WHERE id = ?")) {
                s.setString(1, id);
                try (ResultSet rs = s.executeQuery()) {
                    if (rs.next()) {
                        assertEquals(null, found, id + " committed on two nodes");
                        found = rs.getBytes(1);
                    }
                }
            }
        }
        return found;
    }

    @Test
    void aReplaySendsTheBytesTheApplicationSentNotWhatItsBufferHoldsNow() throws Exception {
        onEveryNode("DROP TABLE IF EXISTS java_bin", "CREATE TABLE java_bin (id text PRIMARY KEY, b bytea)");
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-buffer", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                java.sql.PreparedStatement s = c.prepareStatement("INSERT INTO java_bin VALUES (?, ?)")) {
            c.setAutoCommit(false);
            byte[] buffer = new byte[4];
            for (int i = 1; i <= 2; i++) {
                java.util.Arrays.fill(buffer, (byte) i); // the application's one buffer, reused
                s.setString(1, "buf" + i);
                s.setBytes(2, buffer);
                assertEquals(1, s.executeUpdate());
            }
            endOpenTransactions(1);
            insert(c, "buf-after"); // replayed elsewhere
            c.commit();
        }
        assertEquals(1, ds.getReplayCounts().replayed(), String.valueOf(ds.getReplayCounts()));
        assertEquals(java.util.Arrays.toString(new byte[] {1, 1, 1, 1}), java.util.Arrays.toString(binOf("buf1")),
                "the first row as the application sent it");
        assertEquals(java.util.Arrays.toString(new byte[] {2, 2, 2, 2}), java.util.Arrays.toString(binOf("buf2")));
    }

    @Test
    void aStreamSentAsAParameterMakesTheRequestNotReplayable() throws Exception {
        onEveryNode("DROP TABLE IF EXISTS java_bin", "CREATE TABLE java_bin (id text PRIMARY KEY, b bytea)");
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-stream-param", true);
        SQLException refused = null;
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                java.sql.PreparedStatement s = c.prepareStatement("INSERT INTO java_bin VALUES (?, ?)")) {
            c.setAutoCommit(false);
            s.setString(1, "stream1");
            s.setBinaryStream(2, new java.io.ByteArrayInputStream(new byte[] {7, 7, 7}));
            assertEquals(1, s.executeUpdate());
            endOpenTransactions(1);
            try {
                insert(c, "stream-after");
                c.commit();
            } catch (SQLException e) {
                refused = e;
            }
        }
        byte[] sent = binOf("stream1");
        assertEquals(null, sent == null ? null : "committed " + java.util.Arrays.toString(sent),
                "a stream is read once: its row was replayed without its bytes");
        assertEquals(Refusal.NOT_REPLAYABLE, refused == null ? null : refusalOf(refused), String.valueOf(refused));
    }

    // ---- 5, 10. nothing escapes the proxies -------------------------------------------------------

    @Test
    void aRefcursorsResultSetStaysInsideTheRecord() throws Exception {
        onEveryNode("CREATE OR REPLACE FUNCTION java_cur() RETURNS refcursor AS $$ DECLARE c refcursor := 'c1';"
                + " BEGIN OPEN c FOR SELECT 1; RETURN c; END $$ LANGUAGE plpgsql");
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-refcursor", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT java_cur()")) {
                assertTrue(rs.next());
                ResultSet cur = (ResultSet) rs.getObject(1);
                assertSame(c, cur.getStatement().getConnection(), "the application's connection, not the driver's");
                try (Statement w = cur.getStatement().getConnection().createStatement()) {
                    w.executeUpdate("INSERT INTO java_req VALUES ('through-cursor')");
                }
            }
            insert(c, "after-cursor");
            endOpenTransactions(1);
            c.commit(); // replayed with the cursor and the write through it
        }
        Map<String, Integer> through = rowsOf("through-cursor");
        assertEquals(1, total(through), "the request succeeded, so every write committed: " + through);
        assertEquals(0, through.get("MYDB1"));
        assertEquals(through, rowsOf("after-cursor"), "both on the replay's node");
        assertEquals(1, ds.getReplayCounts().replayed());
    }

    @Test
    void aResultSetOfAFinishedTransactionAnswersItsStatement() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-stale", true);
        try (Connection c = ds.getConnection(); Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT 1")) { // auto-commit: its transaction is over
            assertTrue(rs.next());
            assertSame(s, rs.getStatement());
            assertSame(c, rs.getStatement().getConnection());
        }
    }

    // ---- 6. opening a connection ----------------------------------------------------------------

    @Test
    void aRuntimeExceptionWhileARequestBeginsLeaksNothing() throws Exception {
        pools = new Pools(List.of("MYDB1"));
        HikariDataSource h = pools.get("MYDB1");
        boolean[] failNext = {false};
        DataSource faulty = failingOnce(h, "getAutoCommit", failNext,
                () -> new IllegalStateException("a driver's bug in getAutoCommit"));
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = guard-open-leak; nodes = MYDB1");
        ds.setNodeDataSources(Map.of("MYDB1", faulty));
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        ds.setReplay(true);
        pools.own(ds);
        try (Connection c = ds.getConnection()) {
            assertEquals(0, count(c, "%"));
        }
        failNext[0] = true;
        assertThrows(IllegalStateException.class, ds::getConnection);
        assertTrue(Pools.await(Duration.ofSeconds(5), () -> h.getHikariPoolMXBean().getActiveConnections() == 0),
                "the pooled connection went back: active " + h.getHikariPoolMXBean().getActiveConnections());
        assertEquals(0, ds.getCluster().nodeMetrics().get(0).inFlight(), "the lease was released");
        try (Connection c = ds.getConnection()) {
            assertEquals(0, count(c, "%"));
        }
    }

    @Test
    void aRuntimeExceptionWhileAReplayBeginsLeaksNothing() throws Exception {
        pools = new Pools(NAMES);
        boolean[] failNext = {false};
        Map<String, DataSource> nodes = new java.util.LinkedHashMap<>();
        for (String name : NAMES) {
            nodes.put(name, failingOnce(pools.get(name), "beginRequest", failNext,
                    () -> new IllegalStateException("a driver's bug in beginRequest")));
        }
        AffinityDataSource ds = ReplayFixture.dataSource(pools, nodes, "guard-replay-leak", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
            c.setAutoCommit(false);
            insert(c, "leak1");
            endOpenTransactions(1);
            failNext[0] = true; // the replay's connection
            assertThrows(IllegalStateException.class, () -> insert(c, "leak1b"));
            assertTrue(!failNext[0], "the replay began on a fresh connection");
        }
        for (String name : NAMES) {
            HikariDataSource h = pools.get(name);
            assertTrue(Pools.await(Duration.ofSeconds(5), () -> h.getHikariPoolMXBean().getActiveConnections() == 0),
                    name + ": the replay's connection went back: active " + h.getHikariPoolMXBean().getActiveConnections());
        }
        ds.getCluster().nodeMetrics().forEach(m -> assertEquals(0, m.inFlight(), m.name() + ": leases released"));
        assertEquals(0, total(rowsOf("leak1")));
    }

    @Test
    void aReplayWhoseConnectionCannotBeMadeIsRefusedNoNodeNotReplayedAlready() throws Exception {
        try (FaultProxy p2 = new FaultProxy(PgNodes.port(2)); FaultProxy p3 = new FaultProxy(PgNodes.port(3))) {
            pools = new Pools(NAMES, c -> {
                c.setConnectionTimeout(1000);
                if (c.getPoolName().endsWith("MYDB2")) {
                    c.setJdbcUrl(p2.url());
                } else if (c.getPoolName().endsWith("MYDB3")) {
                    c.setJdbcUrl(p3.url());
                }
            });
            AffinityDataSource ds = ds("guard-replay-no-connection", true);
            SQLException e;
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "nc1");
                // Whichever node the core names for the replay refuses connections: its pool's idle
                // connections are gone (past Hikari's alive bypass window, so checked), new ones reset.
                p2.refuse();
                p3.refuse();
                Thread.sleep(1000);
                endOpenTransactions(1);
                e = assertThrows(SQLException.class, c::commit);
            } finally {
                p2.heal();
                p3.heal();
            }
            assertEquals(0, total(rowsOf("nc1")), "nothing of the request ran again: " + rowsOf("nc1"));
            assertEquals(Refusal.NO_NODE, refusalOf(e), "the replay's connection could not be made: " + e);
            String all = String.valueOf(e) + " " + java.util.Arrays.toString(e.getSuppressed())
                    + " " + e.getCause();
            assertTrue(all.contains("no node could take the replay"), "the refusal says why: " + all);
            assertTrue(java.util.Arrays.stream(e.getSuppressed()).anyMatch(s -> !(s instanceof Continuity.ReplayRefusedException)
                    && s instanceof SQLException), "the connect error is attached: " + all);
            assertEquals(1, ds.getReplayCounts().refused(Refusal.NO_NODE), "counted as no_node: " + ds.getReplayCounts());
            assertEquals(0, ds.getReplayCounts().refused(Refusal.REPLAYED_ALREADY), String.valueOf(ds.getReplayCounts()));
        }
    }

    // ---- 8. a replay's own COMMIT --------------------------------------------------------------

    @Test
    void aReplaysCommitWhoseOutcomeIsUnknownSaysOutcomeUnknown() throws Exception {
        try (FaultProxy p2 = new FaultProxy(PgNodes.port(2)); FaultProxy p3 = new FaultProxy(PgNodes.port(3))) {
            pools = new Pools(NAMES, c -> {
                c.setConnectionTimeout(1000);
                if (c.getPoolName().endsWith("MYDB2")) {
                    c.setJdbcUrl(p2.url());
                } else if (c.getPoolName().endsWith("MYDB3")) {
                    c.setJdbcUrl(p3.url());
                }
            });
            AffinityDataSource ds = ds("guard-nested", true);
            SQLException e;
            Hold lost2;
            Hold lost3;
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build()) {
                c.setAutoCommit(false);
                insert(c, "n1");
                endOpenTransactions(1);
                // The replay's COMMIT on node 2 or 3 runs, its reply is lost and its node unreachable.
                lost2 = p2.loseNextCommitReplyThenRefuse();
                lost3 = p3.loseNextCommitReplyThenRefuse();
                e = assertThrows(SQLException.class, c::commit);
            }
            assertTrue(lost2.acted() || lost3.acted(), "the replay's COMMIT reply was lost: " + e);
            p2.heal();
            p3.heal();
            assertEquals(1, total(rowsOf("n1")), "the replay committed once: " + rowsOf("n1"));
            assertEquals(Refusal.OUTCOME_UNKNOWN, refusalOf(e), "a raise whose write committed: " + e);
            assertEquals(1, ds.getReplayCounts().refusedTotal(), "counted once: " + ds.getReplayCounts());
        }
    }

    // ---- 9. what a transaction's end keeps ------------------------------------------------------

    @Test
    void gettersOfAFinishedTransactionAreNotKept() throws Exception {
        pools = new Pools(NAMES);
        AffinityDataSource ds = ds("guard-getters", true);
        try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                Statement s = c.createStatement()) {
            c.setAutoCommit(false);
            int after1 = 0;
            for (int i = 0; i < 20; i++) {
                c.getTransactionIsolation();
                s.execute("INSERT INTO java_req VALUES ('g" + i + "')");
                assertEquals(1, s.getUpdateCount());
                s.getMoreResults();
                c.getWarnings();
                c.commit();
                if (i == 0) {
                    after1 = ReplayConnection.recordedCalls(c);
                }
            }
            assertEquals(after1, ReplayConnection.recordedCalls(c), "as after the first transaction");
            // A replay of the next transaction runs none of the earlier getters (getUpdateCount
            // alone would answer -1 where it answered 1).
            s.execute("INSERT INTO java_req VALUES ('g-next')");
            endOpenTransactions(1);
            s.execute("INSERT INTO java_req VALUES ('g-next-b')");
            c.commit();
        }
        assertEquals(1, total(rowsOf("g-next")));
        assertEquals(rowsOf("g-next"), rowsOf("g-next-b"));
    }

    @Test
    void aLostCommitReplyFoundCommittedAfterAGetterSucceeds() throws Exception {
        try (FaultProxy proxy = new FaultProxy(PgNodes.port(1))) {
            pools = throughProxy(proxy, c -> {});
            AffinityDataSource ds = ds("guard-committed-getter", true);
            try (Connection c = ds.createConnectionBuilder().shardingKey(keyOn(ds, "MYDB1")).build();
                    Statement s = c.createStatement()) {
                c.setAutoCommit(false);
                s.execute("INSERT INTO java_req VALUES ('cg1')");
                assertEquals(1, s.getUpdateCount());
                Hold lost = proxy.loseNextCommitReply();
                c.commit(); // found committed
                assertTrue(lost.acted());
                s.execute("INSERT INTO java_req VALUES ('cg1-next')");
                c.commit();
            }
            assertEquals(Map.of("MYDB1", 1, "MYDB2", 0, "MYDB3", 0), rowsOf("cg1"));
            assertEquals(1, total(rowsOf("cg1-next")));
        }
    }
}
