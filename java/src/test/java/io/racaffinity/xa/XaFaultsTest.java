package io.racaffinity.xa;

import static io.racaffinity.xa.XaSupport.allNodes;
import static io.racaffinity.xa.XaSupport.assertCompleted;
import static io.racaffinity.xa.XaSupport.assertNothingLeaked;
import static io.racaffinity.xa.XaSupport.backendPid;
import static io.racaffinity.xa.XaSupport.commitOneRow;
import static io.racaffinity.xa.XaSupport.contains;
import static io.racaffinity.xa.XaSupport.insert;
import static io.racaffinity.xa.XaSupport.metrics;
import static io.racaffinity.xa.XaSupport.node;
import static io.racaffinity.xa.XaSupport.pg;
import static io.racaffinity.xa.XaSupport.preparedEmpty;
import static io.racaffinity.xa.XaSupport.preparedOn;
import static io.racaffinity.xa.XaSupport.prepared;
import static io.racaffinity.xa.XaSupport.realNodes;
import static io.racaffinity.xa.XaSupport.refusedPort;
import static io.racaffinity.xa.XaSupport.rollbackPrepared;
import static io.racaffinity.xa.XaSupport.rows;
import static io.racaffinity.xa.XaSupport.startOn;
import static io.racaffinity.xa.XaSupport.startedWithRow;
import static io.racaffinity.xa.XaSupport.steerTo;
import static io.racaffinity.xa.XaSupport.terminateBackend;
import static io.racaffinity.xa.XaSupport.times;
import static io.racaffinity.xa.XaSupport.xaFails;
import static io.racaffinity.xa.XaSupport.xid;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.XaRows;
import io.racaffinity.xa.AffinityXAResourceTest.TestXid;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.postgresql.xa.PGXADataSource;

/**
 * The XA path under faults (issue 11): real crashes of a node ({@code pgnodes kill/restart}), refused
 * connections, admin state changes, application errors at PREPARE (a deferred trigger), a role that may
 * not log in. Every node call has a driver timeout and every test a hard one, so nothing can hang.
 * After each test nothing of ours is in doubt on any node.
 */
@ExtendWith(PgNodes.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class XaFaultsTest {
    static final int FORMAT = AffinityXAResourceTest.FORMAT;
    static final String FAIL_TABLE = "racaff_xa_fail_at_prepare";
    static final String NOLOGIN = "racaff_nologin";

    private final XaSupport xa = new XaSupport();

    @BeforeAll
    static void schema() throws Exception {
        XaRows.create();
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            try (Connection c = XaRows.connect(i); Statement s = c.createStatement()) {
                // An application error raised at PREPARE on a healthy node: a deferred constraint trigger.
                s.execute("CREATE TABLE IF NOT EXISTS " + FAIL_TABLE + " (id int)");
                s.execute("CREATE OR REPLACE FUNCTION racaff_refuse() RETURNS trigger LANGUAGE plpgsql AS"
                        + " $$ BEGIN RAISE EXCEPTION 'refused at commit time'; END $$");
                s.execute("DROP TRIGGER IF EXISTS racaff_refuse_at_prepare ON " + FAIL_TABLE);
                s.execute("CREATE CONSTRAINT TRIGGER racaff_refuse_at_prepare AFTER INSERT ON " + FAIL_TABLE
                        + " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION racaff_refuse()");
                s.execute("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '" + NOLOGIN
                        + "') THEN CREATE ROLE " + NOLOGIN + " NOLOGIN; END IF; END $$");
            }
        }
    }

    @AfterEach
    void closeAll() throws Exception {
        xa.close();
        rollbackPrepared(allNodes());
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            assertEquals(List.of(), prepared(i), "left in doubt on node " + i);
        }
    }

    // ---- fixtures ----------------------------------------------------------------

    AffinityXADataSource ds(String extra, Map<String, XADataSource> nodes) {
        return xa.ds("name = xa-faults-" + xa.openedCount() + "-" + UUID.randomUUID() + "; nodes = "
                + String.join(", ", nodes.keySet()) + extra, nodes);
    }

    AffinityXADataSource ds(String extra) {
        return ds(extra, realNodes());
    }

    /** RAC1 = node 1 alone. */
    AffinityXADataSource onNode1() {
        return ds("", Map.of("RAC1", node(1)));
    }

    /** The XAConnection still works: one more transaction commits a row on node 1 and nothing leaks. */
    static void assertUsableOnNode1(AffinityXADataSource ds, XAConnection c, boolean onePhase) throws Exception {
        String run = UUID.randomUUID().toString();
        commitOneRow(c, run, onePhase);
        assertEquals(1, rows(1, run));
        assertNothingLeaked(ds);
    }

    XAConnection connect(AffinityXADataSource ds) throws SQLException {
        return xa.connect(ds);
    }

    /** A branch on {@code c} whose PREPARE the deferred trigger refuses: the application's error. */
    static Xid refusedAtPrepare(XAConnection c, int value) throws Exception {
        XAResource r = c.getXAResource();
        Xid x = xid(1);
        r.start(x, XAResource.TMNOFLAGS);
        try (Connection h = c.getConnection(); Statement s = h.createStatement()) {
            s.execute("INSERT INTO " + FAIL_TABLE + " VALUES (" + value + ")");
        }
        r.end(x, XAResource.TMSUCCESS);
        xaFails(() -> r.prepare(x));
        return x;
    }

    // ---- 1. one failure counted once; application errors never eject --------------

    @Test
    void aRefusedConnectionAtStartCountsExactlyOneNodeFailure() throws Exception {
        AffinityXADataSource ds = ds("", Map.of("RAC1", pg(refusedPort())));
        XAResource r = connect(ds).getXAResource();
        XAException e = xaFails(() -> r.start(xid(1), XAResource.TMNOFLAGS));
        assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
        assertEquals(1, metrics(ds, "RAC1").failures(), "one failed start, one failure: " + metrics(ds, "RAC1"));
        assertNothingLeaked(ds);
    }

    @Test
    void aRoleThatMayNotLogInNeverCountsAsANodeFailure() throws Exception {
        AffinityXADataSource ds = onNode1();
        XAConnection c = ds.getXAConnection(NOLOGIN, "whatever");
        xa.track(c);
        XAResource r = c.getXAResource();
        for (int i = 0; i < 6; i++) {
            XAException e = xaFails(() -> r.start(xid(1), XAResource.TMNOFLAGS));
            assertTrue(e.getMessage().contains(NOLOGIN) || e.getCause() != null, e.getMessage());
        }
        NodeMetrics m = metrics(ds, "RAC1");
        assertEquals(0, m.failures(), "28000 for one user is not a node failure: " + m);
        assertEquals(NodeState.UP, m.state());
        assertNothingLeaked(ds);
    }

    @Test
    void aTriggerRaisingAtPrepareIsAnApplicationErrorAndNeverEjectsTheNode() throws Exception {
        AffinityXADataSource ds = onNode1();
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        for (int i = 0; i < 6; i++) {
            Xid x = refusedAtPrepare(c, 1);
            try {
                r.rollback(x); // what a TM does after a failed prepare
            } catch (XAException e) {
                // item 2's concern; here only the counting matters
            }
        }
        NodeMetrics m = metrics(ds, "RAC1");
        assertEquals(0, m.failures(), "P0001 at PREPARE is the application's error: " + m);
        assertEquals(NodeState.UP, m.state());
    }

    @Test
    void aTerminatedSessionIsNotANodeFailureAndItsBranchIsReleased() throws Exception {
        AffinityXADataSource ds = onNode1();
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        Xid x = xid(1);
        r.start(x, XAResource.TMNOFLAGS);
        Connection h = c.getConnection();
        terminateBackend(1, backendPid(h)); // 57P01 for this one session
        SQLException dead = assertThrows(SQLException.class, () -> h.createStatement().execute("SELECT 1"));
        assertTrue(dead.getSQLState() != null, String.valueOf(dead));
        try {
            r.end(x, XAResource.TMSUCCESS);
        } catch (XAException e) {
            // the session is gone: either answer is fine
        }
        xaFails(() -> r.prepare(x)); // the branch died with its session
        r.rollback(x); // what the TM does: nothing is left on the node
        NodeMetrics m = metrics(ds, "RAC1");
        assertEquals(0, m.failures(), "one terminated session (57P01, " + dead.getSQLState() + ") is no node failure: "
                + m);
        assertNothingLeaked(ds);
        // the same XAConnection works again: a fresh physical connection
        assertUsableOnNode1(ds, c, true);
    }

    // ---- 2. rollback after a failed prepare releases the branch ---------------------

    @Test
    void rollbackAfterAFailedPrepareSucceedsAndReleasesTheBranch() throws Exception {
        AffinityXADataSource ds = onNode1();
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        Xid x = refusedAtPrepare(c, 2);
        r.rollback(x); // the database rolled the branch back when its PREPARE failed: nothing is left
        assertNothingLeaked(ds);
        assertEquals(List.of(), prepared(1));
        // the connection is clean: the next transaction commits
        assertUsableOnNode1(ds, c, false);
    }

    @Test
    void closingTheXaConnectionReleasesItsUnpreparedAndRefusedBranches() throws Exception {
        AffinityXADataSource ds = onNode1();
        XAConnection refused = ds.getXAConnection();
        XAResource r = refused.getXAResource();
        Xid x = refusedAtPrepare(refused, 3);
        XAConnection active = ds.getXAConnection();
        Xid y = xid(1);
        active.getXAResource().start(y, XAResource.TMNOFLAGS);
        insert(active, UUID.randomUUID().toString(), 1);
        assertEquals(2, ds.getRouter().trackedBranches());
        refused.close(); // the TM lost interest (no rollback): the database has nothing of either branch
        active.close();
        assertNothingLeaked(ds);
        assertEquals(List.of(), prepared(1));
    }

    // ---- 3. a dead physical connection is replaced -----------------------------------

    @Test
    void aCommitRetriedOnTheSameConnectionAfterItsNodeRestartsReachesIt() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        Xid x = xid(1);
        String run = UUID.randomUUID().toString();
        startOn(ds, "RAC3", r, x);
        assertEquals("RAC3", ((AffinityXAResource) r).boundNodeName());
        insert(c, run, 1);
        r.end(x, XAResource.TMSUCCESS);
        assertEquals(XAResource.XA_OK, r.prepare(x));
        PgNodes.kill(3);
        try {
            XAException e = xaFails(() -> r.commit(x, false));
            assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
            assertEquals(1, metrics(ds, "RAC3").failures(), "one failed commit, one failure");
        } finally {
            PgNodes.restart(3);
        }
        r.commit(x, false); // the same XAConnection: its dead physical connection is replaced
        assertCompleted(ds, 3, run, 1);
    }

    /**
     * A branch ended; its node is killed; PREPARE fails (was it prepared before the crash? nobody knows), the TM's
     * rollback cannot connect, the TM gives up (Narayana: ARJUNA012091) and closes the XAConnection. Once the node
     * is back, a recovery scan that does not list the xid settles its fate: rolled back, released.
     */
    @Test
    void aBranchWhosePrepareFailedOnAKilledNodeIsReleasedByTheScanThatShowsItWasNeverPrepared() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c = ds.getXAConnection();
        XAResource r = c.getXAResource();
        Xid x = xid(1);
        String run = UUID.randomUUID().toString();
        startOn(ds, "RAC3", r, x);
        insert(c, run, 1);
        r.end(x, XAResource.TMSUCCESS);
        PgNodes.kill(3);
        try {
            assertEquals(XAException.XAER_RMFAIL, xaFails(() -> r.prepare(x)).errorCode);
            XAException e = xaFails(() -> r.rollback(x));
            assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
            c.close(); // the TM lost interest
            assertEquals(1, ds.getRouter().trackedBranches(), "its fate is unknown while its node is down");
            assertEquals(0, XaSupport.totalInFlight(ds), "no work runs on a dead session: not in flight (it would"
                    + " bias least-outstanding balancing away from the node)");
        } finally {
            PgNodes.restart(3);
        }
        XAResource rr = connect(ds).getXAResource();
        assertFalse(contains(rr.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), x));
        assertCompleted(ds, 3, run, 0);
    }

    @Test
    void aLongLivedRecoveryConnectionFindsTheBranchesOfARestartedNode() throws Exception {
        AffinityXADataSource first = ds("");
        Xid x = preparedOn(first, "RAC2", connect(first), UUID.randomUUID().toString());

        AffinityXADataSource recovery = ds("");
        XAResource rr = connect(recovery).getXAResource();
        assertTrue(contains(rr.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), x));
        PgNodes.kill(2);
        try {
            // node 2 does not answer: its xids are not listed, and the scan says so by not failing the others
            assertFalse(contains(rr.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), x));
        } finally {
            PgNodes.restart(2);
        }
        assertTrue(contains(rr.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), x),
                "the scan after the restart reaches node 2 through a fresh physical connection");
        rr.rollback(x);
        assertEquals(List.of(), prepared(2));
        assertNothingLeaked(recovery);
    }

    // ---- 3b. a gid the answering node does not hold ---------------------------------------

    /** What pgjdbc answers to {@code op} of {@code x}, which its node does not hold: "XA code/SQLState". */
    static String answer(XAResource r, String op, Xid x) {
        XAException e = xaFails(() -> {
            if (op.equals("commit")) {
                r.commit(x, false);
            } else {
                r.rollback(x);
            }
        });
        return XaErrors.name(e.errorCode) + "/" + (e.getCause() instanceof SQLException
                ? ((SQLException) e.getCause()).getSQLState() : String.valueOf(e.getCause()));
    }

    /**
     * The real driver's answers for a gid its node does not hold (docs/xa-faults.md's driver table): pgjdbc
     * says XAER_NOTA, except on the connection that prepared the xid (until it completes it there), where the
     * same "prepared transaction does not exist" (42704) is XAER_RMERR.
     */
    @Test
    void pgjdbcAnswersNotaForAGidItDoesNotHoldButRmerrOnTheConnectionThatPreparedIt() throws Exception {
        Map<String, String> seen = new LinkedHashMap<>();
        XAConnection fresh = xa.track(node(1).getXAConnection());
        Xid unknown = new TestXid(FORMAT, ("never-" + UUID.randomUUID()).getBytes(), new byte[] {1});
        for (String op : List.of("commit", "rollback")) {
            seen.put("fresh " + op, answer(fresh.getXAResource(), op, unknown));
            XAConnection preparing = xa.track(node(1).getXAConnection());
            XAResource r = preparing.getXAResource();
            Xid x = new TestXid(FORMAT, ("gone-" + UUID.randomUUID()).getBytes(), new byte[] {1});
            preparedEmpty(r, x);
            try (Connection admin = XaRows.connect(1); Statement s = admin.createStatement()) {
                s.execute("ROLLBACK PREPARED '" + prepared(1).get(0) + "'"); // another resolver
            }
            seen.put("preparing " + op, answer(r, op, x));
        }
        assertEquals(Map.of("fresh commit", "XAER_NOTA/42704", "fresh rollback", "XAER_NOTA/42704",
                "preparing commit", "XAER_RMERR/42704", "preparing rollback", "XAER_RMERR/42704"), seen);
    }

    /**
     * Another resolver completed the prepared branch (a DBA's COMMIT PREPARED, another TM's recovery): the
     * branch's node answers that it holds no such gid. That is XAER_NOTA (the node answered), and the branch is
     * released; pgjdbc's own XAER_RMERR made Narayana give up with the branch tracked forever.
     */
    @Test
    void aPreparedBranchCompletedByAnotherResolverAnswersNotaAndIsReleased() throws Exception {
        AffinityXADataSource ds = onNode1();
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        String run = UUID.randomUUID().toString();
        Xid x = preparedOn(ds, "RAC1", c, run);
        List<String> gids = prepared(1);
        assertEquals(1, gids.size(), String.valueOf(gids));
        try (Connection admin = XaRows.connect(1); Statement s = admin.createStatement()) {
            s.execute("COMMIT PREPARED '" + gids.get(0) + "'");
        }
        XAException e = xaFails(() -> r.commit(x, false));
        assertEquals(XAException.XAER_NOTA, e.errorCode, XaErrors.name(e.errorCode) + ": " + e.getMessage());
        assertCompleted(ds, 1, run, 1);
        // and the same for a rollback of a branch rolled back elsewhere
        String run2 = UUID.randomUUID().toString();
        Xid y = preparedOn(ds, "RAC1", c, run2);
        try (Connection admin = XaRows.connect(1); Statement s = admin.createStatement()) {
            s.execute("ROLLBACK PREPARED '" + prepared(1).get(0) + "'");
        }
        XAException e2 = xaFails(() -> r.rollback(y));
        assertEquals(XAException.XAER_NOTA, e2.errorCode, XaErrors.name(e2.errorCode) + ": " + e2.getMessage());
        assertCompleted(ds, 1, run2, 0);
    }

    // ---- 4. never NOTA while a node that could hold the branch did not answer --------

    @Test
    void aCommandForAnUnknownXidIsRetryLaterWhileANodeDidNotAnswer() throws Exception {
        // the branch is prepared on node 3 ...
        AffinityXADataSource owner = ds("", Map.of("RAC3", node(3)));
        XAResource r = connect(owner).getXAResource();
        Xid x = xid(1);
        preparedEmpty(r, x);
        // ... and a recovering process cannot reach node 3
        Map<String, XADataSource> nodes = realNodes();
        nodes.put("RAC3", pg(refusedPort()));
        AffinityXADataSource other = ds("", nodes);
        XAResource r2 = connect(other).getXAResource();
        XAException commit = xaFails(() -> r2.commit(x, false));
        assertEquals(XAException.XAER_RMFAIL, commit.errorCode, commit.getMessage());
        XAException rollback = xaFails(() -> r2.rollback(x));
        assertEquals(XAException.XAER_RMFAIL, rollback.errorCode, rollback.getMessage());
        assertEquals(1, prepared(3).size(), "still in doubt, for the retry");
        r.commit(x, false);
        assertNothingLeaked(owner);
    }

    // ---- 6. rollback is never refused for routing reasons ---------------------------

    @Test
    void rollbackOfAnUnpreparedBranchGoesToItsNodeEvenWhenItIsMarkedDown() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        String run = UUID.randomUUID().toString();
        Xid x = startedWithRow(c, run);
        r.end(x, XAResource.TMSUCCESS);
        String node = ((AffinityXAResource) r).boundNodeName();
        ds.getCluster().setNodeState(node, NodeState.DOWN);
        r.rollback(x);
        assertNothingLeaked(ds);
        assertEquals(0, rows(Integer.parseInt(node.substring(3)), run));
    }

    @Test
    void aBranchStartedWhileEveryNodeIsDownPreparesAndCommitsOnItsNode() throws Exception {
        AffinityXADataSource ds = ds("");
        for (String n : ds.getCluster().nodeNames()) {
            ds.getCluster().setNodeState(n, NodeState.DOWN);
        }
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        String run = UUID.randomUUID().toString();
        Xid x = startedWithRow(c, run);
        r.end(x, XAResource.TMSUCCESS);
        int node = Integer.parseInt(((AffinityXAResource) r).boundNodeName().substring(3));
        assertEquals(XAResource.XA_OK, r.prepare(x));
        r.commit(x, false);
        assertEquals(1, rows(node, run));
        assertNothingLeaked(ds);
    }

    // ---- 5. soft mode: a span is visible, and each branch completes where it ran ------

    @Test
    void softModeSpansAGtridOverTwoNodesVisiblyAndCompletesEachBranchOnItsNode() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c1 = connect(ds);
        XAConnection c2 = connect(ds);
        XAResource r1 = c1.getXAResource();
        XAResource r2 = c2.getXAResource();
        String g = "span-" + UUID.randomUUID();
        Xid b1 = TestXid.of(g, 1);
        Xid b2 = TestXid.of(g, 2);
        String run = UUID.randomUUID().toString();
        startOn(ds, "RAC2", r1, b1);
        insert(c1, run, 1);
        ds.getCluster().setNodeState("RAC2", NodeState.DOWN); // alive, but takes no new work
        try (XaSupport.LogLines log = new XaSupport.LogLines()) {
            r2.start(b2, XAResource.TMNOFLAGS);
            String other = ((AffinityXAResource) r2).boundNodeName();
            assertNotEquals("RAC2", other);
            String hex = XidKey.hex(b1.getGlobalTransactionId());
            assertTrue(log.at(Level.WARNING).stream().anyMatch(l -> l.contains(hex) && l.contains("RAC2")
                    && l.contains(other)), "a span is logged at WARNING with the gtrid and both nodes: "
                    + log.at(Level.FINEST));
        }
        assertFalse(r1.isSameRM(r2), "two nodes: two resource managers for the TM");
        assertFalse(r2.isSameRM(r1));
        insert(c2, run, 2);
        r1.end(b1, XAResource.TMSUCCESS);
        r2.end(b2, XAResource.TMSUCCESS);
        assertEquals(XAResource.XA_OK, r1.prepare(b1));
        assertEquals(XAResource.XA_OK, r2.prepare(b2));
        r1.commit(b1, false);
        r2.commit(b2, false);
        int otherNode = Integer.parseInt(((AffinityXAResource) r2).boundNodeName().substring(3));
        assertEquals(1, rows(2, run), "branch 1 committed on its own node");
        assertEquals(1, rows(otherNode, run), "branch 2 committed on its own node");
        assertEquals(1, metrics(ds, "RAC2").txSpans(), "the span is counted on the node it left");
        assertEquals(1, ds.getCluster().nodeMetrics().stream().mapToLong(NodeMetrics::txSpans).sum());
        assertTrue(ds.getCluster().metricsJson().contains("\"tx_spans\":1"), ds.getCluster().metricsJson());
        assertNothingLeaked(ds);
    }

    /** One Narayana transaction, branch 1 on RAC2, RAC2 marked down, then branch 2: returns the run id. */
    String spanUnderNarayana(AffinityXADataSource ds, boolean expectRefusal) throws Exception {
        io.racaffinity.test.Narayana.init();
        jakarta.transaction.TransactionManager tm = io.racaffinity.test.Narayana.tm();
        tm.setTransactionTimeout(60);
        String run = UUID.randomUUID().toString();
        XAConnection c1 = connect(ds);
        XAConnection c2 = connect(ds);
        tm.begin();
        try {
            steerTo(ds, "RAC2", () -> {
                try {
                    tm.getTransaction().enlistResource(c1.getXAResource());
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            insert(c1, run, 1);
            ds.getCluster().setNodeState("RAC2", NodeState.DOWN);
            boolean enlisted;
            try {
                enlisted = tm.getTransaction().enlistResource(c2.getXAResource());
            } catch (jakarta.transaction.SystemException e) {
                enlisted = false;
            }
            assertEquals(!expectRefusal, enlisted, "strict refuses the span, soft allows it");
            if (expectRefusal) {
                tm.rollback();
                return run;
            }
            insert(c2, run, 2);
            tm.getTransaction().delistResource(c1.getXAResource(), XAResource.TMSUCCESS);
            tm.getTransaction().delistResource(c2.getXAResource(), XAResource.TMSUCCESS);
        } catch (Exception | AssertionError e) {
            tm.rollback();
            throw e;
        }
        tm.commit();
        return run;
    }

    @Test
    void underNarayanaASoftSpanCommitsBothBranchesAsTwoResourceManagers() throws Exception {
        AffinityXADataSource ds = ds("");
        String run = spanUnderNarayana(ds, false);
        int total = 0;
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            total += rows(i, run);
            assertTrue(XaRows.prepared(i).stream().noneMatch(g -> g.startsWith(XaRows.NARAYANA_GID)),
                    "nothing in doubt on node " + i);
        }
        assertEquals(1, rows(2, run), "branch 1 on its node");
        assertEquals(2, total, "both branches committed, each once");
        assertEquals(2L, ds.getRouter().statistics().get("prepares"), "two resource managers: two-phase commit");
        assertEquals(1, metrics(ds, "RAC2").txSpans(), "counted");
        assertNothingLeaked(ds);
    }

    @Test
    void underNarayanaStrictModeRefusesTheSpanAndNothingIsCommittedAnywhere() throws Exception {
        // One process: a new gtrid need not wait for other processes to see a
        // node's change (transaction.settle, semantics.md).
        AffinityXADataSource ds = ds("; transaction.strict = true; transaction.settle = 0ms");
        String run = spanUnderNarayana(ds, true);
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            assertEquals(0, rows(i, run), "node " + i);
        }
        assertEquals(0, ds.getCluster().nodeMetrics().stream().mapToLong(NodeMetrics::txSpans).sum(), "no span");
        assertNothingLeaked(ds);
    }

    // ---- 7. the XA heartbeat probes with the application's credentials ---------------

    /** A node XADataSource that counts the connections asked of it (the heartbeat's probes among them). */
    static final class Counting extends XaSupport.ForwardingXADataSource {
        final AtomicInteger calls = new AtomicInteger();

        Counting(XADataSource target) {
            super(target);
        }

        @Override
        public XAConnection getXAConnection() throws SQLException {
            calls.incrementAndGet();
            return super.getXAConnection();
        }

        @Override
        public XAConnection getXAConnection(String user, String password) throws SQLException {
            calls.incrementAndGet();
            return super.getXAConnection(user, password);
        }
    }

    @Test
    void theXaHeartbeatProbesWithTheCredentialsTheApplicationConnectsWith() throws Exception {
        Map<String, XADataSource> nodes = new LinkedHashMap<>();
        List<Counting> counting = new ArrayList<>();
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            PGXADataSource pg = node(i);
            pg.setUser(NOLOGIN); // the node data sources' own default may not log in (as in the WildFly setup)
            Counting k = new Counting(pg);
            counting.add(k);
            nodes.put("RAC" + i, k);
        }
        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setConfig("name = xa-faults-hb-" + UUID.randomUUID() + "; nodes = RAC1, RAC2, RAC3");
        ds.setNodeXADataSources(nodes);
        ds.setHeartbeatIntervalMillis(200);
        ds.setRegisterMBean(false);
        xa.track(ds);
        XAConnection c = ds.getXAConnection("postgres", "");
        xa.track(c);
        XAResource r = c.getXAResource();
        Xid x = xid(1);
        r.start(x, XAResource.TMNOFLAGS);
        r.end(x, XAResource.TMSUCCESS);
        r.commit(x, true);
        // at least 6 probes per node (2 x heartbeat.misses) have run
        assertTrue(Pools.await(Duration.ofSeconds(30), () -> counting.stream().allMatch(k -> k.calls.get() >= 8)),
                "probes ran");
        for (NodeMetrics m : ds.getCluster().nodeMetrics()) {
            assertEquals(NodeState.UP, m.state(), "probed with the application's credentials: " + m);
            // (a probe still running at the next tick counts as a miss: misses alone prove nothing on a busy machine)
            assertEquals(0, m.stateChanges(), "never marked down: " + m);
        }
    }

    /**
     * One user's wrong login (a role that may not log in: 28000) reaches the heartbeat, which probes with the
     * last credentials the application passed: the node answered, so it is no miss. Before the fix every node
     * went Down by heartbeat and strict mode refused the good user's starts (a full outage).
     */
    @Test
    void oneUsersWrongLoginInTheXaHeartbeatNeverMarksANodeDown() throws Exception {
        Map<String, XADataSource> nodes = new LinkedHashMap<>();
        List<Counting> counting = new ArrayList<>();
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            Counting k = new Counting(node(i));
            counting.add(k);
            nodes.put("RAC" + i, k);
        }
        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setConfig("name = xa-faults-hb-login-" + UUID.randomUUID() + "; nodes = RAC1, RAC2, RAC3"
                + "; transaction.strict = true");
        ds.setNodeXADataSources(nodes);
        ds.setHeartbeatIntervalMillis(100);
        ds.setRegisterMBean(false);
        xa.track(ds);
        XAConnection good = xa.track(ds.getXAConnection("postgres", ""));
        XAConnection bad = xa.track(ds.getXAConnection(NOLOGIN, "wrong-password")); // the heartbeat's now
        int before = counting.stream().mapToInt(k -> k.calls.get()).min().orElse(0);
        assertTrue(Pools.await(Duration.ofSeconds(30), () -> counting.stream().allMatch(k -> k.calls.get() >= before + 8)),
                "probes ran with the refused login");
        for (NodeMetrics m : ds.getCluster().nodeMetrics()) {
            assertEquals(NodeState.UP, m.state(), "a refused login is the user's, not the node's: " + m);
            assertEquals(0, m.failures(), "no failure counted: " + m);
        }
        XAResource r = good.getXAResource();
        for (int i = 0; i < 10; i++) {
            Xid x = new TestXid(FORMAT, ("hb-login-" + i + "-" + UUID.randomUUID()).getBytes(), new byte[] {1});
            r.start(x, XAResource.TMNOFLAGS); // strict: refused if the gtrid's node were Down
            r.end(x, XAResource.TMSUCCESS);
            r.commit(x, true);
        }
        xaFails(() -> bad.getXAResource().start(xid(1), XAResource.TMNOFLAGS));
        assertNothingLeaked(ds);
    }

    // ---- 8. one scan lists each xid once ------------------------------------------------

    @Test
    void recoverListsEachXidOnceWhenSeveralInstancesShowTheSameDatabase() throws Exception {
        Map<String, XADataSource> oneDatabase = new LinkedHashMap<>();
        for (int i = 1; i <= 3; i++) {
            oneDatabase.put("INST" + i, node(1));
        }
        AffinityXADataSource first = ds("", oneDatabase);
        XAResource r = connect(first).getXAResource();
        Xid x = xid(1);
        preparedEmpty(r, x);

        AffinityXADataSource recovery = ds("", oneDatabase);
        XAResource rr = connect(recovery).getXAResource();
        Xid[] found = rr.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
        assertEquals(1, times(found, x), "one scan, each xid once");
        rr.commit(x, false);
        assertEquals(List.of(), prepared(1));
        assertNothingLeaked(recovery);
    }
}
