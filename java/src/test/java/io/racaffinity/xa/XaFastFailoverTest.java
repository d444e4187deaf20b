package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.BlockingLogHandler;
import io.racaffinity.test.Faults;
import io.racaffinity.test.PgNodes;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import javax.sql.XAConnection;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.postgresql.xa.PGXADataSource;

/**
 * Fast connection failover for XA branch connections, as for {@code AffinityDataSource}'s borrowed
 * ones (docs/continuity.md): at a hard Down of a node (FAN {@code reason=FAILURE}, heartbeat,
 * ejection) the sessions AffinityXAConnections hold there are aborted at once, so the call on a
 * blackholed node ends now rather than at the driver's socket timeout; a planned drain leaves them
 * to finish their branch.
 */
@ExtendWith(PgNodes.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class XaFastFailoverTest {
    /** Long enough that a call which ends only at it is told apart from an abort. */
    static final int SOCKET_TIMEOUT = 40;
    static final int LOGIN_TIMEOUT = 3;
    @RegisterExtension
    static final XaSupport.Proxies PROXIES = XaSupport.Proxies.nodes();
    @RegisterExtension
    final XaSupport xa = new XaSupport(PROXIES);

    AffinityXADataSource ds(String name) {
        return ds(name, LOGIN_TIMEOUT);
    }

    AffinityXADataSource ds(String name, int loginTimeout) {
        return xa.proxied(name, pg -> {
            pg.setSocketTimeout(SOCKET_TIMEOUT);
            pg.setLoginTimeout(loginTimeout);
            pg.setConnectTimeout(loginTimeout);
            // pgjdbc waits for the reply to its SSL request (sslmode=prefer) only sslResponseTimeout (5 s by
            // default): a connect to a blackholed node would end then, before a longer login timeout.
            pg.setSslResponseTimeout(loginTimeout * 1000);
        });
    }

    static String fan(String node, String tail) {
        return "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=" + node + " host=h " + tail;
    }

    static boolean await(Duration d, BooleanSupplier c) throws InterruptedException {
        long end = System.nanoTime() + d.toNanos();
        while (System.nanoTime() < end) {
            if (c.getAsBoolean()) {
                return true;
            }
            Thread.sleep(20);
        }
        return c.getAsBoolean();
    }

    /** A branch on {@code node} with a row of {@code run}, its handle kept open. */
    private record Branch(XAConnection c, XAResource r, Connection h, Xid x) {}

    private Branch branchOn(AffinityXADataSource ds, String node, String run) throws Exception {
        XAConnection c = xa.connect(ds);
        XAResource r = c.getXAResource();
        Connection h = c.getConnection();
        Xid x = XaSupport.xid(1);
        XaSupport.startOn(ds, node, r, x);
        try (var ps = h.prepareStatement(io.racaffinity.test.XaRows.INSERT)) {
            ps.setString(1, run);
            ps.setInt(2, 1);
            ps.setInt(3, 1);
            ps.executeUpdate();
        }
        return new Branch(c, r, h, x);
    }

    private static CompletableFuture<Object> query(Connection h) {
        return CompletableFuture.supplyAsync(() -> {
            try (Statement s = h.createStatement()) {
                return s.execute("SELECT 1");
            } catch (SQLException e) {
                return e;
            }
        });
    }

    @Test
    void aHardDownAbortsTheBranchSessionsOnTheNodeSoTheCallOnABlackholedNodeEndsAtOnce() throws Exception {
        AffinityXADataSource ds = ds("xa-fcf-failure");
        Cluster cluster = ds.getCluster();
        String run = UUID.randomUUID().toString();
        Branch b = branchOn(ds, "RAC2", run);
        Faults.blackhole(2);
        CompletableFuture<Object> hung = query(b.h()); // what the application does next: it hangs there
        assertThrows(TimeoutException.class, () -> hung.get(500, TimeUnit.MILLISECONDS), "blackholed");
        long t0 = System.nanoTime();
        cluster.applyEvent(fan("RAC2", "status=down reason=FAILURE"));
        Object out;
        try {
            out = hung.get(10, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            fail("the call on the Down node's branch session still hangs 10 s after the Down (ends only at the "
                    + SOCKET_TIMEOUT + " s socket timeout): not aborted");
            return;
        }
        assertInstanceOf(SQLException.class, out, "the aborted call fails");
        String state = ((SQLException) out).getSQLState();
        assertTrue(state != null && state.startsWith("08"), "a connection error: " + out);
        // The next call on the handle fails at once too (it must not open a new session outside the branch).
        SQLException next = assertThrows(SQLException.class, () -> b.h().createStatement().execute("SELECT 1"));
        assertTrue(next.getSQLState().startsWith("08"), "SQLState " + next.getSQLState());
        // The TM's next XA call answers at once: the branch died with its session.
        XAException e = assertThrows(XAException.class, () -> b.r().end(b.x(), XAResource.TMSUCCESS));
        assertTrue(e.errorCode >= XAException.XA_RBBASE && e.errorCode <= XAException.XA_RBEND,
                XaErrors.name(e.errorCode) + ": " + e.getMessage());
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(took < 8_000, "the branch's calls ended within " + took + " ms of the Down");
        // The TM's rollback needs the node's word (a PREPARE lost with a session would leave it in doubt there):
        // retry later while it does not answer, done once it does. Recovery semantics are unchanged.
        XAException rb = assertThrows(XAException.class, () -> b.r().rollback(b.x()));
        assertEquals(XAException.XAER_RMFAIL, rb.errorCode, rb.getMessage());
        assertEquals(1, ds.getRouter().trackedBranches(), "kept for the retry");
        Faults.healAll();
        b.r().rollback(b.x());
        XaSupport.assertCompleted(ds, 2, run, 0);
    }

    /**
     * The TM's COMMIT of a prepared branch hangs on its blackholed node, with no handle open (pure XA calls): the
     * hard Down ends the call at once (XAER_RMFAIL: retry), the branch stays prepared and tracked, and the retry
     * after heal commits it. Recovery is unchanged.
     */
    /**
     * A node Down and Up again between two watch rounds (the operator's setNodeState: nothing pokes the
     * watch), restarted meanwhile: the session an open XAConnection holds there, idle (no branch, no handle
     * on it), is dead. The next round sees the node Up both times and only the core's state change count
     * moved: that session is dropped, so the TM's next branch there opens a new one. Before, the branch's
     * first statement failed ("terminating connection due to administrator command").
     */
    @Test
    void aDownAndUpBetweenTwoWatchRoundsDropsTheIdleSessionARestartEnded() throws Exception {
        AffinityXADataSource ds = ds("xa-fcf-down-up-unseen");
        Cluster cluster = ds.getCluster();
        XAConnection c = xa.connect(ds);
        XAResource r = c.getXAResource();
        Xid x1 = XaSupport.xid(1);
        XaSupport.startOn(ds, "RAC2", r, x1);
        int pid;
        try (Connection h = c.getConnection()) {
            pid = XaSupport.backendPid(h);
        }
        r.end(x1, XAResource.TMSUCCESS);
        r.commit(x1, true);
        Thread.sleep(600); // three watch rounds (200 ms): the steering's own state changes seen
        cluster.setNodeState("RAC2", NodeState.DOWN);
        cluster.setNodeState("RAC2", NodeState.UP);
        XaSupport.terminateBackend(2, pid); // the restart
        Thread.sleep(600); // a watch round or more, which see RAC2 Up
        Xid x2 = XaSupport.xid(2);
        XaSupport.startOn(ds, "RAC2", r, x2);
        try (Connection h = c.getConnection()) {
            assertNotEquals(pid, XaSupport.backendPid(h), "a new session on RAC2");
        }
        r.end(x2, XAResource.TMSUCCESS);
        r.commit(x2, true);
    }

    @Test
    void aHardDownEndsACommitHungOnABlackholedNodeAndThePreparedBranchIsKept() throws Exception {
        AffinityXADataSource ds = ds("xa-fcf-commit");
        XAConnection c = xa.connect(ds);
        String run = UUID.randomUUID().toString();
        Xid x = XaSupport.preparedOn(ds, "RAC2", c, run); // its handle is closed
        XAResource r = c.getXAResource();
        Faults.blackhole(2);
        CompletableFuture<Object> commit = CompletableFuture.supplyAsync(() -> {
            try {
                r.commit(x, false);
                return "committed";
            } catch (XAException e) {
                return e;
            }
        });
        assertThrows(TimeoutException.class, () -> commit.get(500, TimeUnit.MILLISECONDS), "blackholed");
        ds.getCluster().applyEvent(fan("RAC2", "status=down reason=FAILURE"));
        Object out;
        try {
            out = commit.get(10, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            fail("the commit on the Down node still hangs 10 s after the Down: not aborted");
            return;
        }
        assertInstanceOf(XAException.class, out, "the commit failed: " + out);
        assertEquals(XAException.XAER_RMFAIL, ((XAException) out).errorCode, ((XAException) out).getMessage());
        assertEquals(1, ds.getRouter().trackedBranches(), "kept for the retry");
        Faults.healAll();
        assertEquals(1, XaSupport.prepared(2).size(), "still prepared on its node");
        r.commit(x, false);
        XaSupport.assertCompleted(ds, 2, run, 1);
    }

    /**
     * A start whose connect to its node hangs (blackholed: the login waits for its timeout) must not hold up the
     * node's hard Down: the Down's abort of the XAConnections' sessions there (XaRouter.nodeFailed, which the upkeep
     * runs on its one thread) takes each XAConnection's lock, and a connect made under that lock kept it until the
     * connect gave up. The start fails with its connect as before, and its XAConnection works on afterwards.
     */
    @Test
    void aHardDownDoesNotWaitBehindAConnectToTheBlackholedNode() throws Exception {
        int login = 15;
        AffinityXADataSource ds = ds("xa-fcf-connect", login);
        XAConnection c = xa.connect(ds);
        XAResource r = c.getXAResource();
        Xid x = XaSupport.xid(1);
        Faults.blackhole(2);
        long t0 = System.nanoTime();
        CompletableFuture<Object> start = CompletableFuture.supplyAsync(() -> {
            try {
                XaSupport.startOn(ds, "RAC2", r, x);
                return "started";
            } catch (SQLException | RuntimeException e) {
                return e;
            }
        });
        assertThrows(TimeoutException.class, () -> start.get(1, TimeUnit.SECONDS), "the connect hangs");
        int node = ds.getCluster().nodeId("RAC2");
        XaRouter router = ds.getRouter();
        CompletableFuture<Integer> down = CompletableFuture.supplyAsync(() -> router.nodeFailed(node));
        try {
            down.get(3, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            fail("the hard Down's abort still waits behind the connect to the blackholed node 3 s on (until the"
                    + " connect gives up)");
        }
        assertFalse(start.isDone(), "the abort returned while the connect was still under way");
        Object out = start.get(login + 10, TimeUnit.SECONDS);
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(out instanceof RuntimeException && out.toString().contains("XAException"),
                "the start fails with its connect: " + out);
        // The window this test holds open is the connect's: it must last the login timeout, not end early.
        assertTrue(took >= (login - 1) * 1000L, "the connect gave up after " + took + " ms, before its "
                + login + " s login timeout: " + out);
        Faults.healAll();
        Xid next = XaSupport.xid(1);
        XaSupport.startOn(ds, "RAC1", r, next);
        r.end(next, XAResource.TMSUCCESS);
        r.rollback(next);
        XaSupport.assertNothingLeaked(ds);
    }

    /**
     * The XA data source's heartbeat logs the state changes it causes, on its own thread: with that line stuck in a
     * blocking log handler (a full pipe, a stalled syslog) the heartbeat stopped, so a second node that stopped
     * answering was never found dead (its branch sessions never aborted, work still routed there).
     */
    @Test
    void theHeartbeatFindsASecondDeadNodeWhileTheFirstDownsLogLineIsStuckInItsHandler() throws Exception {
        Map<String, PGXADataSource> nodes = XaSupport.instances("RAC", PROXIES.ports());
        nodes.values().forEach(pg -> {
            pg.setSocketTimeout(2);
            pg.setLoginTimeout(1);
            pg.setConnectTimeout(1);
        });
        String name = "xa-hb-log-" + UUID.randomUUID();
        AffinityXADataSource ds = xa.ds("name = " + name + "; nodes = RAC1, RAC2, RAC3; heartbeat.misses = 2", nodes);
        ds.setHeartbeatIntervalMillis(100);
        ds.setHeartbeatTimeoutSeconds(1);
        Cluster cluster = ds.getCluster();
        try (BlockingLogHandler stuck = new BlockingLogHandler(name + ": node RAC2 is now DOWN")) {
            Faults.blackhole(2);
            assertTrue(stuck.logging.await(20, TimeUnit.SECONDS), "the heartbeat found RAC2 dead and logs it");
            Faults.blackhole(3);
            assertTrue(await(Duration.ofSeconds(20), () -> cluster.nodeState("RAC3") == NodeState.DOWN),
                    "the heartbeat finds RAC3 dead while RAC2's Down is stuck in the log handler: "
                            + cluster.nodeState("RAC3"));
        } finally {
            Faults.healAll();
        }
    }

    @Test
    void aPlannedDrainLeavesTheBranchToFinishAndOnlyAFailureAbortsIt() throws Exception {
        AffinityXADataSource ds = ds("xa-fcf-drain");
        Cluster cluster = ds.getCluster();
        String run = UUID.randomUUID().toString();
        Branch onDrained = branchOn(ds, "RAC2", run);
        String other = UUID.randomUUID().toString();
        Branch onFailed = branchOn(ds, "RAC3", other);
        cluster.applyEvent(fan("RAC2", "status=down reason=USER drain_timeout=1"));
        assertTrue(await(Duration.ofSeconds(10), () -> cluster.nodeState("RAC2") == NodeState.DOWN));
        // A failure of another node afterwards: once its branch is aborted, the drain's end was seen too.
        cluster.applyEvent(fan("RAC3", "status=down reason=FAILURE"));
        assertTrue(await(Duration.ofSeconds(10), () -> {
            try {
                return onFailed.h().isClosed() || !onFailed.h().isValid(1);
            } catch (SQLException e) {
                return true;
            }
        }), "the failed node's branch session is aborted");
        assertFalse(onDrained.h().isClosed(), "the drained node's branch goes on");
        XaSupport.insert(onDrained.c(), run, 2);
        onDrained.r().end(onDrained.x(), XAResource.TMSUCCESS);
        assertEquals(XAResource.XA_OK, onDrained.r().prepare(onDrained.x()));
        onDrained.r().commit(onDrained.x(), false);
        assertEquals(2, XaSupport.rows(2, run), "the branch finished on its drained node");
        XAException e = assertThrows(XAException.class, () -> onFailed.r().end(onFailed.x(), XAResource.TMSUCCESS));
        assertTrue(e.errorCode >= XAException.XA_RBBASE && e.errorCode <= XAException.XA_RBEND,
                XaErrors.name(e.errorCode));
        onFailed.r().rollback(onFailed.x());
        assertEquals(0, XaSupport.rows(3, other));
        XaSupport.assertNothingLeaked(ds);
    }
}
