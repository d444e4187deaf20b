package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.XaRows;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
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
 * The three defects the failure matrix ({@link FailureMatrixTest}) found, each pinned down on one node
 * without a TM: a branch whose session is lost (a crashed node's sessions end with 57P01, the same
 * state {@code pg_terminate_backend} sends), and a commit whose reply is lost.
 */
@ExtendWith(PgNodes.class)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class XaLostSessionTest {
    private final XaSupport xa = new XaSupport();

    @BeforeAll
    static void schema() throws Exception {
        XaRows.create();
    }

    @AfterEach
    void closeAll() throws Exception {
        xa.close();
        XaSupport.rollbackPrepared(1);
    }

    AffinityXADataSource ds(XADataSource node) {
        return xa.ds("name = lost-session-" + UUID.randomUUID() + "; nodes = RAC1", Map.of("RAC1", node));
    }

    /** Ends the session of the physical connection behind {@code c} (57P01, as a crashed node's sessions). */
    static void terminate(XAConnection c) throws SQLException {
        int pid;
        try (Connection h = c.getConnection()) {
            pid = XaSupport.backendPid(h);
        }
        XaSupport.terminateBackend(1, pid);
    }

    /** A branch with a row of its own, started on a new connection of {@code ds}. */
    private record Branch(XAConnection c, XAResource r, String run, Xid x) {}

    /** A branch started on {@code c}, with a row of {@code run} inserted through a handle the caller keeps. */
    private record Held(XAResource r, Xid x, Connection h, int pid) {}

    private static Held startHolding(XAConnection c, String run) throws Exception {
        XAResource r = c.getXAResource();
        Xid x = XaSupport.xid(1);
        r.start(x, XAResource.TMNOFLAGS);
        Connection h = c.getConnection();
        XaSupport.insert(h, run, 1);
        return new Held(r, x, h, XaSupport.backendPid(h));
    }

    private Branch startBranch(AffinityXADataSource ds) throws Exception {
        XAConnection c = xa.connect(ds);
        String run = UUID.randomUUID().toString();
        return new Branch(c, c.getXAResource(), run, XaSupport.startedWithRow(c, run));
    }

    /**
     * A transaction manager's call on another thread (a timeout's end and rollback) was the first to find the
     * branch's session dead: it marked the session broken and took the branch off it, and nothing told the handle
     * the application still held. The application's next statement on that handle went to a fresh session, in
     * autocommit, outside the branch that had died, and was committed (plain pgjdbc fails it on the dead session).
     * It must fail, as after a hard Down: never a fresh session for work that belonged to a branch.
     */
    @Test
    void aHandleWhoseBranchDiedUnderAnotherThreadsXaCallFailsInsteadOfRunningOutsideIt() throws Exception {
        AffinityXADataSource ds = ds(XaSupport.node(1));
        XAConnection c = xa.connect(ds);
        String run = UUID.randomUUID().toString();
        Held held = startHolding(c, run);
        XAResource r = held.r();
        Xid x = held.x();
        Connection h = held.h();
        int pid = held.pid();
        XaSupport.terminateBackend(1, pid);
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> !backendAlive(pid)), "session " + pid + " ended");
        CompletableFuture.runAsync(() -> {
            // The TM's timeout, on its own thread: whether each call fails is the driver's business.
            try {
                r.end(x, XAResource.TMFAIL);
            } catch (XAException e) {
                // the session is dead
            }
            try {
                r.rollback(x);
            } catch (XAException e) {
                // the session is dead
            }
        }).join();
        SQLException e = assertThrows(SQLException.class, () -> XaSupport.insert(h, run, 1),
                "the handle's work ran on a fresh session outside its dead branch");
        assertEquals("08006", e.getSQLState(), e.getMessage());
        assertEquals(0, XaSupport.rows(1, run), "nothing of the branch, nor after it, was committed");
        h.close();
        XaSupport.commitOneRow(c, run + "-after", true); // a new handle works on a fresh session
    }

    /**
     * Decided (docs/java-datasource.md, "A live branch the TM ended on another thread"): when the session is alive,
     * a TM's timeout ({@code end(TMFAIL)} and {@code rollback} on its own thread) leaves the handle in local mode,
     * autocommit, as the XA contract puts a handle outside any branch and as pgjdbc's own XAConnection does: the
     * branch's work is rolled back, a later statement on the handle commits on its own. Only the layer that enlisted
     * the connection knows whether the application's thread is still in the timed-out transaction, so refusing
     * belongs there (an application server's connection manager). Both data sources, side by side: the same
     * outcome, rows and all.
     */
    @Test
    void aLiveBranchTheTmEndedOnAnotherThreadLeavesTheHandleInLocalModeAsPgjdbcDoes() throws Exception {
        AffinityXADataSource affinity = ds(XaSupport.node(1));
        for (XADataSource source : new XADataSource[] {XaSupport.node(1), affinity}) {
            String what = source == affinity ? "AffinityXADataSource" : "pgjdbc's PGXADataSource";
            XAConnection c = source == affinity ? xa.connect(affinity) : source.getXAConnection();
            try {
                String run = UUID.randomUUID().toString();
                Held held = startHolding(c, run);
                XAResource r = held.r();
                Xid x = held.x();
                Connection h = held.h();
                CompletableFuture.runAsync(() -> {
                    try {
                        r.end(x, XAResource.TMFAIL);
                        r.rollback(x);
                    } catch (XAException e) {
                        throw new IllegalStateException(what + ": the TM's end and rollback of a live branch", e);
                    }
                }).join();
                assertEquals(0, XaSupport.rows(1, run), what + ": the branch's row was rolled back");
                XaSupport.insert(h, run, 1);
                assertTrue(h.getAutoCommit(), what + ": the handle is in local mode, autocommit");
                assertEquals(1, XaSupport.rows(1, run), what + ": the statement after the branch committed on its own");
                assertEquals(held.pid(), XaSupport.backendPid(h), what + ": on the same, live session");
                h.close();
            } finally {
                c.close();
            }
        }
        XaSupport.assertNothingLeaked(affinity);
    }

    /**
     * A handle's call looked up its session, then (unlocked: it may connect) another call on the same XAConnection
     * found that session dead and replaced it: the call went to the closed session and failed, although a fresh
     * one was in place. The hook holds the call in that window while a recovery scan on another thread fails on the
     * terminated session (which marks it broken) and the next scan replaces it.
     */
    @Test
    void aHandleCallWhoseSessionIsReplacedMeanwhileGoesToTheFreshSession() throws Exception {
        AffinityXADataSource ds = ds(XaSupport.node(1));
        XaRouter router = ds.getRouter();
        AffinityXAConnection c = (AffinityXAConnection) xa.connect(ds);
        XAResource r = c.getXAResource();
        Connection h = c.getConnection();
        int pid = XaSupport.backendPid(h);
        AffinityXAConnection.Physical first = c.existing(0);
        AtomicBoolean armed = new AtomicBoolean(true);
        router.targetHook = () -> {
            if (!armed.getAndSet(false)) {
                return;
            }
            CompletableFuture.runAsync(() -> {
                try {
                    XaSupport.terminateBackend(1, pid);
                    assertTrue(Pools.await(Duration.ofSeconds(10), () -> !backendAlive(pid)), "session " + pid
                            + " ended");
                    assertThrows(XAException.class, () -> r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN),
                            "the scan fails on the terminated session");
                    r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }).join();
        };
        try {
            int now = XaSupport.backendPid(h);
            assertFalse(armed.get(), "the call went through the window");
            assertNotSame(first, c.existing(0), "the scan replaced the session");
            assertNotEquals(pid, now, "the call ran on the fresh session");
        } finally {
            router.targetHook = null;
        }
        XaSupport.assertNothingLeaked(ds);
    }

    /** Other calls that replace the session at every look-up: the call gives up after a bounded number of rounds. */
    @Test
    void aHandleCallWhoseSessionIsReplacedAtEveryLookUpGivesUpWithAConnectionError() throws Exception {
        AffinityXADataSource ds = ds(XaSupport.node(1));
        XaRouter router = ds.getRouter();
        AffinityXAConnection c = (AffinityXAConnection) xa.connect(ds);
        Connection h = c.getConnection();
        XaSupport.backendPid(h);
        AtomicInteger lookUps = new AtomicInteger();
        router.targetHook = () -> {
            lookUps.incrementAndGet();
            // What a failed XA call (markBroken) and the next one (physical) do on another thread.
            c.markBroken(0);
            try {
                c.physical(0);
            } catch (XAException e) {
                throw new IllegalStateException(e);
            }
        };
        try {
            SQLException e = assertThrows(SQLException.class, () -> XaSupport.backendPid(h));
            assertEquals("08001", e.getSQLState(), e.getMessage());
            assertEquals(AffinityXAConnection.TARGET_ATTEMPTS, lookUps.get());
        } finally {
            router.targetHook = null;
        }
        XaSupport.backendPid(h); // the session in place now serves it
    }

    private static boolean backendAlive(int pid) {
        try (Connection admin = XaRows.connect(1); Statement s = admin.createStatement();
                ResultSet rs = s.executeQuery("SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid)) {
            rs.next();
            return rs.getInt(1) > 0;
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void rollingBackANeverPreparedBranchWhoseSessionIsLostSucceedsAndReleasesIt() throws Exception {
        AffinityXADataSource ds = ds(XaSupport.node(1));
        Branch b = startBranch(ds);
        terminate(b.c());
        b.r().end(b.x(), XAResource.TMSUCCESS); // pgjdbc: no I/O
        // what a TM does: roll it back. The session is gone, so is its transaction: rolled back. Before the fix
        // pgjdbc's XAER_RMERR came back and the branch stayed tracked forever (a TM does not retry it).
        b.r().rollback(b.x());
        assertEquals(0, XaSupport.rows(1, b.run()));
        XaSupport.assertNothingLeaked(ds);
    }

    @Test
    void aPreparedBranchWhoseSessionIsLostAnswersRetryLaterNotRmerrAndRollsBackOnTheRetry() throws Exception {
        AffinityXADataSource ds = ds(XaSupport.node(1));
        Branch b = startBranch(ds);
        b.r().end(b.x(), XAResource.TMSUCCESS);
        assertEquals(XAResource.XA_OK, b.r().prepare(b.x()));
        terminate(b.c());
        // the TM rolls back (another branch voted no): pgjdbc answers XAER_RMERR for the lost session (57P01), and
        // a TM gives up on XAER_RMERR (Narayana: a heuristic outcome), leaving the prepared branch in doubt
        XAException e = assertThrows(XAException.class, () -> b.r().rollback(b.x()));
        assertEquals(XAException.XAER_RMFAIL, e.errorCode, XaErrors.name(e.errorCode) + ": " + e.getMessage());
        assertEquals(1, ds.getRouter().trackedBranches(), "kept for the retry");
        assertEquals(1, XaSupport.prepared(1).size(), "still prepared on the node");
        b.r().rollback(b.x()); // the TM's retry: a fresh connection
        XaSupport.assertCompleted(ds, 1, b.run(), 0);
    }

    /** pgjdbc's XAResources, except that a COMMIT's reply is lost once (the commit happened). */
    static XADataSource losingOneCommitReply(PGXADataSource pg) {
        boolean[] lost = {false};
        return (XADataSource) Proxy.newProxyInstance(XADataSource.class.getClassLoader(),
                new Class<?>[] {XADataSource.class}, (proxy, m, args) -> {
                    Object o = invoke(m, pg, args);
                    if (!(o instanceof XAConnection)) {
                        return o;
                    }
                    XAConnection xc = (XAConnection) o;
                    XAResource real = xc.getXAResource();
                    InvocationHandler xr = (p2, m2, a2) -> {
                        Object out = invoke(m2, real, a2);
                        if (m2.getName().equals("commit") && !lost[0]) {
                            lost[0] = true;
                            XAException e = new XAException("test: the commit's reply was lost");
                            e.errorCode = XAException.XAER_RMFAIL;
                            e.initCause(new SQLException("test: connection reset", "08006"));
                            throw e;
                        }
                        return out;
                    };
                    XAResource wrapped = (XAResource) Proxy.newProxyInstance(XAResource.class.getClassLoader(),
                            new Class<?>[] {XAResource.class}, xr);
                    return Proxy.newProxyInstance(XAConnection.class.getClassLoader(), new Class<?>[] {XAConnection.class},
                            (p3, m3, a3) -> m3.getName().equals("getXAResource") ? wrapped : invoke(m3, xc, a3));
                });
    }

    static Object invoke(java.lang.reflect.Method m, Object target, Object[] args) throws Throwable {
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    @Test
    void aPreparedBranchWhoseCommitReplyWasLostIsReleasedByTheNextRecoveryScan() throws Exception {
        AffinityXADataSource ds = ds(losingOneCommitReply(XaSupport.node(1)));
        Branch b = startBranch(ds);
        b.r().end(b.x(), XAResource.TMSUCCESS);
        assertEquals(XAResource.XA_OK, b.r().prepare(b.x()));
        XAException e = assertThrows(XAException.class, () -> b.r().commit(b.x(), false));
        assertEquals(XAException.XAER_RMFAIL, e.errorCode);
        assertEquals(1, XaSupport.rows(1, b.run()), "committed: only the reply was lost");
        assertEquals(1, ds.getRouter().trackedBranches(), "kept for a retry");
        // The TM's recovery scans: the node answers and no longer lists the xid, so the TM never retries it (Narayana
        // looks only for listed xids). Before the fix the branch, the core's transaction and the lease stayed forever.
        XAConnection recovery = xa.connect(ds);
        assertEquals(0, recovery.getXAResource().recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN).length);
        XaSupport.assertNothingLeaked(ds);
    }
}
