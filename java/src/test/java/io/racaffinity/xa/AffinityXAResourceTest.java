package io.racaffinity.xa;

import static io.racaffinity.test.Stubs.forward;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.Route;
import io.racaffinity.StrictAffinityException;
import io.racaffinity.Scope;
import io.racaffinity.jdbc.AffinityDataSource;
import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.jdbc.RouteScope;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.XaRows;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** The routing XAResource driven by hand, as a TM would: binding, 2PC routing, strict mode, recovery. */
@ExtendWith(PgNodes.class)
class AffinityXAResourceTest {
    static final int FORMAT = 0x52414346; // not Narayana's: these never meet its recovery
    private final XaSupport xa = new XaSupport();
    private final List<XAConnection> connections = xa.connections();

    record TestXid(int getFormatId, byte[] getGlobalTransactionId, byte[] getBranchQualifier) implements Xid {
        static TestXid of(String gtrid, int branch) {
            return new TestXid(FORMAT, gtrid.getBytes(StandardCharsets.UTF_8), new byte[] {(byte) branch});
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Xid && ((Xid) o).getFormatId() == getFormatId
                    && Arrays.equals(((Xid) o).getGlobalTransactionId(), getGlobalTransactionId)
                    && Arrays.equals(((Xid) o).getBranchQualifier(), getBranchQualifier);
        }

        @Override
        public int hashCode() {
            return Arrays.hashCode(getGlobalTransactionId) * 31 + Arrays.hashCode(getBranchQualifier);
        }
    }

    @BeforeAll
    static void table() throws Exception {
        XaRows.create();
    }

    @AfterEach
    void close() throws Exception {
        xa.close();
        // nothing of ours may stay in doubt
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            for (String gid : XaRows.prepared(i)) {
                assertFalse(gid.startsWith(FORMAT + "_"), "left in doubt on node " + i + ": " + gid);
            }
        }
    }

    AffinityXADataSource ds(String extra) {
        return xa.track(NarayanaXaTest.xaDataSource("xa-unit-" + xa.openedCount(), true, extra));
    }

    XAConnection connect(AffinityXADataSource ds) throws Exception {
        return xa.connect(ds);
    }

    static int node(XAResource r) {
        return Integer.parseInt(((AffinityXAResource) r).boundNodeName().substring(3));
    }

    @Test
    void aHandleTakenBeforeStartWorksOnTheNodeOfTheGtridAndBranchesShareIt() throws Exception {
        AffinityXADataSource ds = ds("");
        Set<Integer> nodes = new HashSet<>();
        for (int t = 0; t < 12; t++) {
            String g = "unit-" + UUID.randomUUID();
            XAConnection a = connect(ds);
            XAConnection b = connect(ds);
            Connection ca = a.getConnection(); // JCA order: handle first, then enlistment
            XAResource ra = a.getXAResource();
            XAResource rb = b.getXAResource();
            ra.start(TestXid.of(g, 1), XAResource.TMNOFLAGS);
            assertFalse(rb.isSameRM(ra), "pgjdbc: every connection is its own branch");
            rb.start(TestXid.of(g, 2), XAResource.TMNOFLAGS);
            int n = node(ra);
            assertEquals(n, node(rb), "both branches of " + g + " on one node");
            assertEquals(PgNodes.port(n), Pools.serverPort(ca), "the early handle runs on the branch's node");
            try (Connection cb = b.getConnection()) {
                assertEquals(PgNodes.port(n), Pools.serverPort(cb));
            }
            ca.close();
            ra.end(TestXid.of(g, 1), XAResource.TMSUCCESS);
            rb.end(TestXid.of(g, 2), XAResource.TMSUCCESS);
            assertEquals(XAResource.XA_OK, ra.prepare(TestXid.of(g, 1)));
            assertEquals(XAResource.XA_OK, rb.prepare(TestXid.of(g, 2)));
            assertTrue(XaRows.prepared(n).stream().filter(x -> x.startsWith(FORMAT + "_")).count() >= 2);
            // commit through the other resource: 2PC goes to the branch's node whatever resource carries it
            rb.commit(TestXid.of(g, 1), false);
            ra.commit(TestXid.of(g, 2), false);
            nodes.add(n);
        }
        assertTrue(nodes.size() >= 2, "gtrids spread: " + nodes);
        assertEquals(0, ds.getRouter().trackedBranches());
        assertEquals(0, NarayanaXaTest.liveTransactions(ds));
        // one physical connection per node at most, reused across transactions
        assertTrue(connections.stream().allMatch(c -> ((AffinityXAConnection) c).physicalConnections() <= 3));
    }

    /** Branch {@code bqual} of a new gtrid, empty and prepared through {@code r}. */
    private static Xid preparedEmptyBranch(XAResource r, int bqual) throws Exception {
        Xid x = TestXid.of("unit-" + UUID.randomUUID(), bqual);
        XaSupport.preparedEmpty(r, x);
        return x;
    }

    @Test
    void aPreparedBranchWhoseNodeIsMarkedDownStillCommitsThereNeverElsewhere() throws Exception {
        AffinityXADataSource ds = ds("");
        XAResource r = connect(ds).getXAResource();
        Xid x = preparedEmptyBranch(r, 1);
        String owner = ((AffinityXAResource) r).boundNodeName();
        ds.getCluster().setNodeState(owner, NodeState.DOWN);
        // 2PC commands are never refused for routing reasons: the node is marked down but answers
        // (an unreachable one gives XAER_RMFAIL: XaFaultsTest kills one)
        r.commit(x, false);
        assertFalse(XaRows.prepared(node(r)).stream().anyMatch(g -> g.startsWith(FORMAT + "_")));
        assertEquals(0, ds.getRouter().trackedBranches());
        assertEquals(0, NarayanaXaTest.liveTransactions(ds));
    }

    @Test
    void strictModeRefusesToStartABranchAwayFromItsDownOwner() throws Exception {
        // One process: a new gtrid need not wait for other processes to see the
        // state changes below (transaction.settle, semantics.md).
        AffinityXADataSource ds = ds("; transaction.strict = true; transaction.settle = 0ms");
        XAResource r1 = connect(ds).getXAResource();
        XAResource r2 = connect(ds).getXAResource();
        String g = "unit-" + UUID.randomUUID();
        r1.start(TestXid.of(g, 1), XAResource.TMNOFLAGS);
        String owner = ((AffinityXAResource) r1).boundNodeName();
        ds.getCluster().setNodeState(owner, NodeState.DOWN);
        XAException e = assertThrows(XAException.class, () -> r2.start(TestXid.of(g, 2), XAResource.TMNOFLAGS));
        assertEquals(XAException.XAER_RMFAIL, e.errorCode);
        assertTrue(e.getMessage().contains(owner), e.getMessage());
        // the TM rolls the transaction back; branch 1's rollback goes to its own node, down or not
        r1.end(TestXid.of(g, 1), XAResource.TMSUCCESS);
        r1.rollback(TestXid.of(g, 1));
        assertEquals(0, ds.getRouter().trackedBranches(), "rolled back and released");
        assertEquals(0, NarayanaXaTest.liveTransactions(ds));
        ds.getCluster().setNodeState(owner, NodeState.UP);
        // the connection is usable again
        Xid next = TestXid.of("unit-" + UUID.randomUUID(), 1);
        r1.start(next, XAResource.TMNOFLAGS);
        r1.end(next, XAResource.TMSUCCESS);
        r1.commit(next, true);
        // the JMX switch (UseStrictXAAffinity) maps to the same scope
        ds.getCluster().setStrict(Scope.TRANSACTION, false);
        assertFalse(ds.getCluster().isStrict(Scope.TRANSACTION));
    }

    @Test
    void xidsWithTheSameGtridButAnotherFormatIdAreAnotherTransaction() throws Exception {
        // XA names a global transaction by formatId and gtrid together: one TM's gtrid bytes may be
        // another's, and neither may be joined to the other's node. A draining owner keeps its own
        // transaction's branches and takes no new transaction.
        AffinityXADataSource ds = ds("; transaction.settle = 0ms");
        XAResource r1 = connect(ds).getXAResource();
        XAResource r2 = connect(ds).getXAResource();
        String g = "unit-" + UUID.randomUUID();
        Xid mine = TestXid.of(g, 1);
        Xid theirs = new TestXid(FORMAT + 1, mine.getGlobalTransactionId(), mine.getBranchQualifier());
        r1.start(mine, XAResource.TMNOFLAGS);
        String owner = ((AffinityXAResource) r1).boundNodeName();
        ds.getCluster().setNodeState(owner, NodeState.DRAINING);
        try {
            r2.start(theirs, XAResource.TMNOFLAGS);
            assertNotEquals(owner, ((AffinityXAResource) r2).boundNodeName(), "a new transaction, not a branch of " + g);
            assertEquals(2, NarayanaXaTest.liveTransactions(ds), "two transactions registered");
            r2.end(theirs, XAResource.TMSUCCESS);
            r2.rollback(theirs);
            assertEquals(1, NarayanaXaTest.liveTransactions(ds), "the other one's end leaves " + g + " of FORMAT");
        } finally {
            r1.end(mine, XAResource.TMSUCCESS);
            r1.rollback(mine);
            ds.getCluster().setNodeState(owner, NodeState.UP);
        }
        assertEquals(0, ds.getRouter().trackedBranches());
        assertEquals(0, NarayanaXaTest.liveTransactions(ds));
    }

    @Test
    void recoveryScansEveryNodeAndCompletesEachXidWhereItIs() throws Exception {
        // prepare branches of gtrids that land on every node, then forget everything (a "crash")
        AffinityXADataSource first = ds("");
        List<Xid> xids = new ArrayList<>();
        Set<Integer> nodes = new HashSet<>();
        for (int t = 0; t < 30 && nodes.size() < 3; t++) {
            XAConnection c = connect(first);
            XAResource r = c.getXAResource();
            Xid x = TestXid.of("unit-" + UUID.randomUUID(), 7);
            r.start(x, XAResource.TMNOFLAGS);
            try (Connection h = c.getConnection()) {
                h.createStatement().execute("SELECT 1");
            }
            r.end(x, XAResource.TMSUCCESS);
            r.prepare(x);
            xids.add(x);
            nodes.add(node(r));
        }
        assertEquals(3, nodes.size());
        for (XAConnection c : connections) {
            c.close();
        }
        connections.clear();

        // a new process: empty registry
        AffinityXADataSource ds = ds("");
        XAResource r = connect(ds).getXAResource();
        Xid[] found = r.recover(XAResource.TMSTARTRSCAN);
        assertEquals(0, r.recover(XAResource.TMENDRSCAN).length);
        Set<String> ours = new HashSet<>();
        for (Xid x : found) {
            if (x.getFormatId() == FORMAT) {
                ours.add(new String(x.getGlobalTransactionId(), StandardCharsets.UTF_8));
            }
        }
        for (Xid x : xids) {
            assertTrue(ours.contains(new String(x.getGlobalTransactionId(), StandardCharsets.UTF_8)));
        }
        // commit half, roll back half, all through one resource: each goes to its node
        for (int i = 0; i < xids.size(); i++) {
            if (i % 2 == 0) {
                r.commit(xids.get(i), false);
            } else {
                r.rollback(xids.get(i));
            }
        }
        assertEquals(0, NarayanaXaTest.liveTransactions(ds));
        assertEquals(xids.size(), ds.getRouter().statistics().get("commits") + ds.getRouter().statistics()
                .get("rollbacks"));
    }

    /** Branches of another process prepared on every node (its registry forgotten: in doubt for this one). */
    List<Xid> inDoubtOnEveryNode() throws Exception {
        AffinityXADataSource first = ds("");
        List<Xid> xids = new ArrayList<>();
        Set<Integer> nodes = new HashSet<>();
        for (int t = 0; t < 30 && nodes.size() < 3; t++) {
            XAConnection c = connect(first);
            XAResource r = c.getXAResource();
            Xid x = TestXid.of("unit-abort-" + UUID.randomUUID(), 7);
            r.start(x, XAResource.TMNOFLAGS);
            r.end(x, XAResource.TMSUCCESS);
            r.prepare(x);
            xids.add(x);
            nodes.add(node(r));
        }
        assertEquals(3, nodes.size());
        return xids;
    }

    /** The gtrids of {@code xids} that {@code found} does not list. */
    static List<String> missing(List<Xid> xids, Xid[] found) {
        Set<XidKey> listed = new HashSet<>();
        for (Xid x : found) {
            listed.add(XidKey.of(x));
        }
        List<String> missing = new ArrayList<>();
        for (Xid x : xids) {
            if (!listed.contains(XidKey.of(x))) {
                missing.add(new String(x.getGlobalTransactionId(), StandardCharsets.UTF_8));
            }
        }
        return missing;
    }

    static long nodeFailures(AffinityXADataSource ds) throws SQLException {
        return ds.getCluster().nodeMetrics().stream().mapToLong(m -> m.failures()).sum();
    }

    /**
     * The application aborts its handle (Connection.abort: the physical session to its node ends), then the TM
     * scans through the same XAConnection. Only that session is gone, the node is fine: it must answer the scan
     * (its in-doubt branches listed) and no node failure be counted for the application's own abort.
     */
    @Test
    void aScanAfterTheApplicationAbortedItsHandleStillAsksThatNodeAndBlamesNoNode() throws Exception {
        List<Xid> xids = inDoubtOnEveryNode();
        AffinityXADataSource ds = ds("");
        XAConnection c = connect(ds);
        Connection h = c.getConnection();
        int port = Pools.serverPort(h); // binds the handle, opening the XAConnection's own session there
        h.abort(Runnable::run);
        assertTrue(h.isClosed(), "an aborted connection is closed");
        XAResource r = c.getXAResource();
        List<String> missing = missing(xids, r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN));
        long failures = nodeFailures(ds);
        for (Xid x : xids) {
            r.rollback(x);
        }
        assertEquals(List.of(), missing, "in doubt but not listed (the aborted session was on port " + port + ")");
        assertEquals(0, failures, "node failures counted for the application's abort");
    }

    /**
     * The same abort while the scan is on that very session (held at the node driver's recover until the abort
     * is done): the scan still lists that node's in-doubt branches and blames no node.
     */
    @Test
    void anAbortWhileTheScanIsOnThatSessionLeavesTheScanWhole() throws Exception {
        List<Xid> xids = inDoubtOnEveryNode();
        int[] heldNode = {-1};
        java.util.concurrent.CountDownLatch atRecover = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.CountDownLatch aborted = new java.util.concurrent.CountDownLatch(1);
        Map<String, XADataSource> gated = new LinkedHashMap<>();
        NarayanaXaTest.nodes().forEach((name, node) -> gated.put(name, recoverGated(node, () -> {
            if (name.equals("RAC" + heldNode[0]) && atRecover.getCount() > 0) {
                atRecover.countDown();
                await(aborted);
            }
        })));
        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setConfig("name = xa-unit-gated-" + xa.openedCount() + "; nodes = RAC1, RAC2, RAC3");
        ds.setNodeXADataSources(gated);
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        xa.track(ds);
        XAConnection c = connect(ds);
        Connection h = c.getConnection();
        int port = Pools.serverPort(h);
        for (int i = 1; i <= PgNodes.COUNT; i++) {
            if (PgNodes.port(i) == port) {
                heldNode[0] = i;
            }
        }
        XAResource r = c.getXAResource();
        java.util.concurrent.CompletableFuture<Xid[]> scan = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
            try {
                return r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
            } catch (XAException e) {
                throw new java.util.concurrent.CompletionException(e);
            }
        });
        assertTrue(atRecover.await(30, java.util.concurrent.TimeUnit.SECONDS), "the scan reached node " + heldNode[0]);
        h.abort(Runnable::run);
        aborted.countDown();
        List<String> missing = missing(xids, scan.get(30, java.util.concurrent.TimeUnit.SECONDS));
        long failures = nodeFailures(ds);
        for (Xid x : xids) {
            r.rollback(x);
        }
        assertEquals(List.of(), missing, "in doubt but not listed (the session aborted during the scan: node "
                + heldNode[0] + ")");
        assertEquals(0, failures, "node failures counted for the application's abort");
    }

    private static void await(java.util.concurrent.CountDownLatch l) {
        try {
            l.await(30, java.util.concurrent.TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** {@code node}, whose XAResources run {@code beforeRecover} at the start of each recover call. */
    static XADataSource recoverGated(XADataSource node, Runnable beforeRecover) {
        return (XADataSource) java.lang.reflect.Proxy.newProxyInstance(XADataSource.class.getClassLoader(),
                new Class<?>[] {XADataSource.class}, (p, m, a) -> {
                    Object o = forward(node, m, a);
                    if (!(o instanceof XAConnection xc)) {
                        return o;
                    }
                    return java.lang.reflect.Proxy.newProxyInstance(XAConnection.class.getClassLoader(),
                            new Class<?>[] {XAConnection.class}, (p2, m2, a2) -> {
                                Object o2 = forward(xc, m2, a2);
                                if (!(o2 instanceof XAResource xr)) {
                                    return o2;
                                }
                                return java.lang.reflect.Proxy.newProxyInstance(XAResource.class.getClassLoader(),
                                        new Class<?>[] {XAResource.class}, (p3, m3, a3) -> {
                                            if (m3.getName().equals("recover")) {
                                                beforeRecover.run();
                                            }
                                            return forward(xr, m3, a3);
                                        });
                            });
                });
    }

    /** Connection.abort on a closed connection is a no-op (java.sql.Connection); the handle is one. */
    @Test
    void abortOfAClosedHandleIsANoOp() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c = connect(ds);
        Connection h = c.getConnection();
        h.close();
        h.abort(Runnable::run);
        Connection unused = c.getConnection();
        c.close();
        unused.abort(Runnable::run);
        assertTrue(unused.isClosed());
    }

    @Test
    void aCommandForAnXidNeverSeenFindsItsNodeByScanning() throws Exception {
        AffinityXADataSource first = ds("");
        XAResource r = connect(first).getXAResource();
        Xid x = preparedEmptyBranch(r, 3);
        int n = node(r);
        AffinityXADataSource other = ds("");
        XAResource r2 = connect(other).getXAResource();
        r2.rollback(x); // no recover() first
        for (String gid : XaRows.prepared(n)) {
            assertNotEquals(FORMAT + "_" + Arrays.toString(x.getGlobalTransactionId()), gid);
        }
        XAException e = assertThrows(XAException.class, () -> r2.commit(TestXid.of("unit-never", 1), false));
        assertEquals(XAException.XAER_NOTA, e.errorCode);
    }

    /**
     * A soft-mode span (one gtrid, branches on two nodes) prepared by a process that then went away. A restarted
     * TM commits from its log without recover(): the scan for another xid reaches the node of one branch first
     * and registers the gtrid there, yet the other branch, on another node, must still be found there.
     */
    @Test
    void aCommandForAnUnseenBranchOfASpannedGtridFindsTheNodeThatHoldsIt() throws Exception {
        AffinityXADataSource first = ds("");
        XAConnection c1 = connect(first);
        XAConnection c2 = connect(first);
        XAConnection c3 = connect(first);
        String g = "unit-span-" + UUID.randomUUID();
        Xid x1 = TestXid.of(g, 1);
        Xid x2 = TestXid.of(g, 2);
        try {
            XaSupport.startOn(first, "RAC3", c1.getXAResource(), x1);
            first.getCluster().setNodeState("RAC3", NodeState.DOWN); // soft mode re-places the gtrid
            first.getCluster().setNodeState("RAC2", NodeState.DRAINING);
            c2.getXAResource().start(x2, XAResource.TMNOFLAGS);
            first.getCluster().setNodeState("RAC3", NodeState.UP);
            first.getCluster().setNodeState("RAC2", NodeState.UP);
            assertEquals(3, node(c1.getXAResource()));
            assertEquals(1, node(c2.getXAResource()));
            c1.getXAResource().end(x1, XAResource.TMSUCCESS);
            c2.getXAResource().end(x2, XAResource.TMSUCCESS);
            assertEquals(XAResource.XA_OK, c1.getXAResource().prepare(x1));
            assertEquals(XAResource.XA_OK, c2.getXAResource().prepare(x2));
            // another in-doubt xid on RAC1, the node a scan asks first
            Xid x3 = TestXid.of("unit-other-" + UUID.randomUUID(), 1);
            XAResource r3 = c3.getXAResource();
            XaSupport.steerTo(first, "RAC1", () -> {
                try {
                    XaSupport.preparedEmpty(r3, x3);
                } catch (XAException e) {
                    throw new IllegalStateException(e);
                }
            });
            assertEquals(1, node(r3));

            AffinityXADataSource other = ds(""); // the restarted TM: no recover() first
            XAResource r = connect(other).getXAResource();
            r.commit(x3, false);
            r.commit(x1, false);
            r.commit(x2, false);
            assertEquals(List.of(), XaSupport.prepared(3), "x1 committed on RAC3");
            assertEquals(List.of(), XaSupport.prepared(1), "x2 and x3 committed on RAC1");
            assertEquals(0, other.getRouter().trackedBranches());
        } finally {
            XaSupport.rollbackPrepared(XaSupport.allNodes());
        }
    }

    /** Node XADataSources whose new connections can be refused (a smart shutdown: 57P03) while open ones go on. */
    private static Map<String, XADataSource> refusingNewConnections(AtomicBoolean refuse) {
        Map<String, XADataSource> m = new LinkedHashMap<>();
        XaSupport.realNodes().forEach((name, ds) -> m.put(name, new XaSupport.ForwardingXADataSource(ds) {
            @Override
            public XAConnection getXAConnection() throws SQLException {
                if (refuse.get()) {
                    throw new SQLException("FATAL: the database system is shutting down", "57P03");
                }
                return super.getXAConnection();
            }
        }));
        return m;
    }

    /**
     * A 2PC command (or a recovery scan) that needs a short-lived connection because the XAConnection's own
     * connection to the node holds another, active branch, and cannot open one: only that short-lived
     * connection failed. The active branch's healthy session must go on and commit.
     */
    @Test
    void aShortLivedConnectionThatCannotOpenLeavesTheActiveBranchOnItsSession() throws Exception {
        shortLivedConnectionRefused(true);
    }

    @Test
    void aRecoveryScanThatCannotOpenAShortLivedConnectionLeavesTheActiveBranchOnItsSession() throws Exception {
        shortLivedConnectionRefused(false);
    }

    private void shortLivedConnectionRefused(boolean commit) throws Exception {
        AtomicBoolean refuse = new AtomicBoolean();
        AffinityXADataSource ds = xa.ds("name = temp-fail; nodes = RAC1, RAC2, RAC3", refusingNewConnections(refuse));
        XAConnection xc = connect(ds);
        XAResource r = xc.getXAResource();
        String run = "temp-" + UUID.randomUUID();
        try {
            Xid x = XaSupport.preparedOn(ds, "RAC1", xc, run); // its phase 2 still to come
            Xid y = XaSupport.xid(1);
            XaSupport.startOn(ds, "RAC1", r, y); // active on the same XAConnection and node
            XaSupport.insert(xc, run, 2);
            refuse.set(true);
            if (commit) {
                XAException e = assertThrows(XAException.class, () -> r.commit(x, false));
                assertEquals(XAException.XAER_RMFAIL, e.errorCode, "retry later: " + e.getMessage());
            }
            assertThrows(XAException.class, () -> r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN));
            XaSupport.insert(xc, run, 3); // y goes on on its open session
            r.end(y, XAResource.TMSUCCESS);
            assertEquals(XAResource.XA_OK, r.prepare(y));
            r.commit(y, false);
            assertEquals(2, XaSupport.rows(1, run), "y's two rows committed on RAC1");
            refuse.set(false);
            r.commit(x, false);
            XaSupport.assertCompleted(ds, 1, run, 3);
        } finally {
            refuse.set(false);
            XaSupport.rollbackPrepared(XaSupport.allNodes());
        }
    }

    /**
     * A scan whose TMSTARTRSCAN failed (no node answered) never began: a TM that goes on with TMNOFLAGS must
     * hear XAER_PROTO, as without any TMSTARTRSCAN, not an empty list it would take for "nothing in doubt".
     */
    @Test
    void aContinuationAfterAFailedScanStartIsAProtocolError() throws Exception {
        AtomicBoolean refuse = new AtomicBoolean(true);
        AffinityXADataSource ds = xa.ds("name = scan-fail; nodes = RAC1, RAC2, RAC3", refusingNewConnections(refuse));
        XAResource r = connect(ds).getXAResource();
        XAException start = assertThrows(XAException.class, () -> r.recover(XAResource.TMSTARTRSCAN));
        assertEquals("XAER_RMFAIL", XaErrors.name(start.errorCode), start.getMessage());
        refuse.set(false);
        XAException e = assertThrows(XAException.class, () -> r.recover(XAResource.TMNOFLAGS),
                "the failed TMSTARTRSCAN opened no scan");
        assertEquals("XAER_PROTO", XaErrors.name(e.errorCode), e.getMessage());
        assertEquals(0, r.recover(XAResource.TMENDRSCAN).length, "ending a scan that never began is harmless");
    }

    /**
     * A TM's recovery helper keeps its XAResource after the data source is closed: every call answers
     * XAER_RMFAIL (docs/java-datasource.md), never an unchecked exception the TM does not expect.
     */
    @Test
    void recoveryAndCommandsAfterTheDataSourceClosedAnswerXaerRmfail() throws Exception {
        for (boolean affinity : new boolean[] {true, false}) {
            AffinityXADataSource ds = NarayanaXaTest.xaDataSource("xa-closed-" + affinity, affinity, "");
            XAConnection c = ds.getXAConnection();
            try {
                XAResource r = c.getXAResource();
                ds.close();
                Xid x = TestXid.of("unit-closed-" + UUID.randomUUID(), 1);
                XAException e = assertThrows(XAException.class,
                        () -> r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), "affinity " + affinity);
                assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
                e = assertThrows(XAException.class, () -> r.commit(x, false), "affinity " + affinity);
                assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
                e = assertThrows(XAException.class, () -> r.rollback(x), "affinity " + affinity);
                assertEquals(XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
            } finally {
                c.close();
                ds.close();
            }
        }
    }

    /**
     * Token mode (AffinityFilter opens the request's routing-token decision): work outside a global transaction
     * goes to the decided node, and a refused request gets no connection, as with AffinityDataSource.
     */
    @Test
    void workOutsideATransactionFollowsTheRequestsRoutingTokenAndItsRefusal() throws Exception {
        AffinityXADataSource ds = ds("");
        connect(ds).close(); // started: its cluster decides the token
        Cluster c = ds.getCluster();
        Route route = c.routeToken(c.sessionToken("xa-token-session")).route();
        Set<Integer> ports = new HashSet<>();
        try (RouteScope s = AffinityDataSource.withRequestRoute(c, route)) {
            for (int i = 0; i < 12; i++) {
                XAConnection xc = connect(ds);
                try (Connection h = xc.getConnection()) {
                    ports.add(Pools.serverPort(h));
                }
                xc.close();
            }
        }
        assertEquals(Set.of(PgNodes.port(route.node() + 1)), ports, "token routes to " + route.nodeName());
        try (RouteScope s = AffinityDataSource.withRequestRefusal(c,
                new StrictAffinityException("strict session affinity: the session's node is down"))) {
            XAConnection xc = connect(ds);
            assertThrows(SQLException.class, () -> {
                try (Connection h = xc.getConnection()) {
                    Pools.serverPort(h);
                }
            }, "a refused request gets no connection elsewhere");
        }
    }

    /**
     * Token mode: a new branch begun inside the request goes to the node the request's routing token routes it
     * to, where its session work goes too (docs/semantics.md, "Token routes and new transactions"). Before, the
     * core never saw the token and placed the gtrid by its own hash, so the request ran on two nodes.
     */
    @Test
    void aNewBranchBegunInATokenRequestGoesToTheNodeItsTokenRoutesTo() throws Exception {
        AffinityXADataSource ds = ds("");
        connect(ds).close(); // started: its cluster decides the tokens
        Cluster c = ds.getCluster();
        Set<String> nodes = new HashSet<>();
        for (int i = 0; i < 12; i++) {
            String token = c.sessionToken("xa-branch-token-" + i);
            Route route = c.routeToken(token).route();
            nodes.add(route.nodeName());
            try (RouteScope s = AffinityDataSource.withRequestRoute(c, route, token)) {
                XAConnection xc = connect(ds);
                try {
                    XAResource r = xc.getXAResource();
                    Xid x = TestXid.of("unit-token-" + UUID.randomUUID(), 1);
                    r.start(x, XAResource.TMNOFLAGS);
                    try (Connection h = xc.getConnection()) {
                        assertEquals(PgNodes.port(route.node() + 1), Pools.serverPort(h), "token " + token);
                    }
                    assertEquals(route.nodeName(), ((AffinityXAResource) r).boundNodeName(), "token " + token);
                    r.end(x, XAResource.TMSUCCESS);
                    r.rollback(x);
                } finally {
                    xc.close();
                }
            }
        }
        assertTrue(nodes.size() >= 2, "the tokens name more than one node: " + nodes);
    }

    // ---- what a TM reads from the resource (issue 11, minor) -----------------------

    @Test
    void setTransactionTimeoutAnswersWhatTheNodeDriverAnswers() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        assertFalse(r.setTransactionTimeout(30), "no node driver has said it applies timeouts");
        Xid x = TestXid.of("unit-" + UUID.randomUUID(), 1);
        r.start(x, XAResource.TMNOFLAGS);
        assertFalse(r.setTransactionTimeout(30), "pgjdbc has no transaction timeout and answers false");
        assertEquals(30, r.getTransactionTimeout());
        r.end(x, XAResource.TMSUCCESS);
        r.commit(x, true);
    }

    @Test
    void isSameRmOfAnUnboundResourceOpensNoConnection() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection a = connect(ds);
        XAConnection b = connect(ds);
        Xid x = TestXid.of("unit-" + UUID.randomUUID(), 1);
        a.getXAResource().start(x, XAResource.TMNOFLAGS);
        assertFalse(b.getXAResource().isSameRM(a.getXAResource()));
        assertEquals(0, ((AffinityXAConnection) b).physicalConnections(), "the question opened no connection");
        a.getXAResource().end(x, XAResource.TMSUCCESS);
        a.getXAResource().commit(x, true);
    }

    @Test
    void aReadOnlyPrepareAndAForgetAreNotCountedAsCommits() throws Exception {
        AffinityXADataSource ds = ds("");
        XAResource r = connect(ds).getXAResource();
        Xid x = TestXid.of("unit-" + UUID.randomUUID(), 1);
        int vote = XaSupport.preparedEmpty(r, x);
        if (vote == XAResource.XA_OK) {
            r.commit(x, false); // a driver that prepares empty branches: then it is a commit
            assertEquals(1L, ds.getRouter().statistics().get("commits"));
        } else {
            assertEquals(XAResource.XA_RDONLY, vote);
            assertEquals(0L, ds.getRouter().statistics().get("commits"), "nothing was committed");
            assertEquals(1L, ds.getRouter().statistics().get("readOnly"));
        }
        Xid y = TestXid.of("unit-" + UUID.randomUUID(), 1);
        r.start(y, XAResource.TMNOFLAGS);
        r.end(y, XAResource.TMSUCCESS);
        r.rollback(y);
        long commits = ds.getRouter().statistics().get("commits");
        assertThrows(XAException.class, () -> r.forget(y)); // nothing to forget: pgjdbc answers an error
        assertEquals(commits, ds.getRouter().statistics().get("commits"), "a forget is no commit");
        assertEquals(0, ds.getRouter().trackedBranches());
    }

    @Test
    void aClosedXaConnectionAnswersXaerRmfailToEveryCall() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        c.close();
        Xid x = TestXid.of("unit-" + UUID.randomUUID(), 1);
        List<org.junit.jupiter.api.function.Executable> calls = List.of(
                () -> r.start(x, XAResource.TMNOFLAGS), () -> r.end(x, XAResource.TMSUCCESS), () -> r.prepare(x),
                () -> r.commit(x, false), () -> r.commit(x, true), () -> r.rollback(x), () -> r.forget(x),
                () -> r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), () -> r.setTransactionTimeout(5));
        List<String> codes = new ArrayList<>();
        for (var call : calls) {
            codes.add(XaErrors.name(assertThrows(XAException.class, call).errorCode));
        }
        assertEquals(java.util.Collections.nCopies(calls.size(), "XAER_RMFAIL"), codes);
        assertEquals(0, ds.getRouter().trackedBranches());
    }

    /**
     * XA allows one active association per resource: a start while the connection is in a branch is XAER_PROTO
     * (pgjdbc's answer on one connection). A second gtrid placed on another node was started on a second session
     * instead, and the connection's handle went over to it: the first branch's work and the second's mixed.
     */
    @Test
    void aResourceInABranchRefusesToStartAnotherWhereverItsGtridLands() throws Exception {
        AffinityXADataSource ds = ds("");
        XAConnection c = connect(ds);
        XAResource r = c.getXAResource();
        List<String> names = ds.getCluster().nodeNames();
        Xid first = TestXid.of("unit-" + UUID.randomUUID(), 1);
        XaSupport.startOn(ds, names.get(0), r, first);
        String firstNode = ((AffinityXAResource) r).boundNodeName();
        List<String> codes = new ArrayList<>();
        for (String n : names) {
            Xid other = TestXid.of("unit-" + UUID.randomUUID(), 1);
            XAException[] refused = new XAException[1];
            XaSupport.steerTo(ds, n, () -> {
                try {
                    r.start(other, XAResource.TMNOFLAGS);
                } catch (XAException e) {
                    refused[0] = e;
                }
            });
            codes.add(n + "=" + (refused[0] == null ? "started" : XaErrors.name(refused[0].errorCode)));
            if (refused[0] == null) {
                r.end(other, XAResource.TMSUCCESS);
                r.rollback(other);
            }
        }
        assertEquals(names.stream().map(n -> n + "=XAER_PROTO").toList(), codes, "a start while the resource is in a branch");
        assertEquals(firstNode, ((AffinityXAResource) r).boundNodeName(), "the handle stays with the first branch");
        r.end(first, XAResource.TMSUCCESS);
        r.rollback(first);
        assertEquals(0, ds.getRouter().trackedBranches());
        // Once ended, the resource takes the next branch wherever it lands.
        Xid next = TestXid.of("unit-" + UUID.randomUUID(), 1);
        XaSupport.startOn(ds, names.get(1), r, next);
        r.end(next, XAResource.TMSUCCESS);
        r.rollback(next);
    }

    private static long inFlight(Cluster c, String node) {
        return c.nodeMetrics().stream().filter(m -> m.name().equals(node)).findFirst().orElseThrow().inFlight();
    }

    private static AffinityXADataSource over(Cluster shared) {
        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setCluster(shared);
        ds.setNodeXADataSources(NarayanaXaTest.nodes());
        ds.setHeartbeatIntervalMillis(0);
        ds.setRegisterMBean(false);
        return ds;
    }

    /**
     * A cluster shared with other data sources outlives an XA data source's close: a branch it had prepared stays
     * in doubt for the TM's recovery, but no work is in flight through the closed data source any more. Its lease
     * was kept for good, so the node counted one in-flight unit (balancing, JMX {@code NodeInFlight}) forever.
     */
    @Test
    void closingAnXaDataSourceOfASharedClusterLeavesNoBranchInFlightOnIt() throws Exception {
        try (Cluster shared = Cluster.fromConfig("name = xa-unit-shared; nodes = RAC1, RAC2, RAC3")) {
            AffinityXADataSource ds = xa.track(over(shared));
            Xid x = XaSupport.preparedOn(ds, "RAC2", connect(ds), UUID.randomUUID().toString());
            assertEquals(1L, inFlight(shared, "RAC2"), "the prepared branch is in flight on its node");
            ds.close();
            assertEquals(0L, inFlight(shared, "RAC2"), "in flight through a closed data source");
            AffinityXADataSource recovery = xa.track(over(shared));
            XAResource r = connect(recovery).getXAResource();
            assertTrue(XaSupport.contains(r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), x),
                    "the prepared branch stayed in doubt for recovery");
            r.commit(x, false);
            assertEquals(0L, inFlight(shared, "RAC2"));
            assertEquals(0, recovery.getRouter().trackedBranches());
        }
    }

    /**
     * A pooled XAConnection after a transaction in JCA order (the application closes its handle inside the
     * transaction, the TM completes it later): the next handle, used outside any transaction, routes by its own
     * request, as a handle does (docs/java-datasource.md, lazy binding). It went on to the last transaction's node,
     * so a refused token request got a connection there, and a token's work ran off its node.
     */
    @Test
    void aHandleAfterAJcaOrderTransactionRoutesByItsOwnRequest() throws Exception {
        AffinityXADataSource ds = ds("");
        connect(ds).close(); // started: its cluster decides the tokens
        Cluster c = ds.getCluster();
        Route route = c.routeToken(c.sessionToken("xa-after-jca")).route();
        String other = c.nodeNames().stream().filter(n -> !n.equals(route.nodeName())).findFirst().orElseThrow();
        XAConnection xc = connect(ds);
        XAResource r = xc.getXAResource();
        Connection h = xc.getConnection(); // JCA: the handle, then the enlistment
        Xid x = TestXid.of("unit-" + UUID.randomUUID(), 1);
        XaSupport.startOn(ds, other, r, x);
        Pools.serverPort(h);
        h.close(); // inside the transaction
        r.end(x, XAResource.TMSUCCESS);
        r.commit(x, true);
        try (RouteScope s = AffinityDataSource.withRequestRoute(c, route)) {
            try (Connection next = xc.getConnection()) {
                assertEquals(PgNodes.port(route.node() + 1), Pools.serverPort(next),
                        "the next request's work goes where its token routes it (" + route.nodeName() + ")");
            }
        }
        try (RouteScope s = AffinityDataSource.withRequestRefusal(c,
                new StrictAffinityException("strict session affinity: the session's node is down"))) {
            Xid y = TestXid.of("unit-" + UUID.randomUUID(), 1);
            XaSupport.startOn(ds, other, r, y);
            r.end(y, XAResource.TMSUCCESS);
            r.rollback(y);
            assertThrows(SQLException.class, () -> {
                try (Connection next = xc.getConnection()) {
                    Pools.serverPort(next);
                }
            }, "a refused request gets no connection on the last branch's node");
        }
    }
}
