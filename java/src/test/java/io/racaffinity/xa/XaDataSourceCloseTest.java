package io.racaffinity.xa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.jdbc.AffinityXADataSource;
import io.racaffinity.test.Faults;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.XaRows;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import javax.sql.XAConnection;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@code AffinityXADataSource.close()} with XAConnections still open: as {@code AffinityDataSource.close()}
 * (HikariCP's close) it ends them: their sessions are aborted and they are closed, so no branch works on
 * through a closed data source and no close waits on a dead node. A prepared branch stays on its node, in
 * doubt, for the TM's recovery; an unprepared one is rolled back by the database with its session.
 */
@ExtendWith(PgNodes.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class XaDataSourceCloseTest {
    static final int SOCKET_TIMEOUT = 40;
    @RegisterExtension
    static final XaSupport.Proxies PROXIES = XaSupport.Proxies.nodes();
    @RegisterExtension
    final XaSupport xa = new XaSupport(PROXIES);

    AffinityXADataSource ds(String name) {
        return xa.proxied(name, pg -> pg.setSocketTimeout(SOCKET_TIMEOUT));
    }

    private static void insert(Connection h, String run) throws SQLException {
        try (PreparedStatement ps = h.prepareStatement(XaRows.INSERT)) {
            ps.setString(1, run);
            ps.setInt(2, 1);
            ps.setInt(3, 1);
            ps.executeUpdate();
        }
    }

    @Test
    void closeEndsTheOpenXaConnectionsAndLeavesPreparedBranchesForRecovery() throws Exception {
        AffinityXADataSource ds = ds("xa-close");
        String active = UUID.randomUUID().toString();
        String prepared = UUID.randomUUID().toString();
        // an unprepared branch on RAC1, its handle open
        XAConnection c1 = xa.connect(ds);
        Connection h1 = c1.getConnection();
        Xid x1 = XaSupport.xid(1);
        XaSupport.startOn(ds, "RAC1", c1.getXAResource(), x1);
        insert(h1, active);
        // a prepared branch on RAC2, its TM about to commit
        XAConnection c2 = xa.connect(ds);
        Xid x2 = XaSupport.preparedOn(ds, "RAC2", c2, prepared);
        XAResource r2 = c2.getXAResource();

        ds.close();

        SQLException e = assertThrows(SQLException.class, () -> h1.createStatement().execute("SELECT 1"),
                "the branch works on through a closed data source");
        assertTrue(e.getSQLState().startsWith("08"), "SQLState " + e.getSQLState());
        XAException rm = assertThrows(XAException.class, () -> r2.commit(x2, false));
        assertEquals(XAException.XAER_RMFAIL, rm.errorCode, "the TM retries through recovery: " + rm.getMessage());
        assertEquals(List.of(), XaSupport.prepared(1), "the unprepared branch is not in doubt");
        assertEquals(0, XaSupport.rows(1, active));
        assertEquals(1, XaSupport.prepared(2).size(), "the prepared branch stays on its node for recovery");
        // The TM's recovery, through a data source of its own: the prepared branch is found and committed.
        AffinityXADataSource recovery = ds("xa-close-recovery");
        XAResource r = xa.connect(recovery).getXAResource();
        assertTrue(XaSupport.contains(r.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN), x2));
        r.commit(x2, false);
        XaSupport.assertCompleted(recovery, 2, prepared, 1);
    }

    /**
     * A getXAConnection() that passed its closed check when close() began: its connection was registered after
     * close() had collected the open ones, so it escaped and worked on through the closed data source. The hook
     * holds the call between its checks and its registration while close() runs to its end.
     */
    @Test
    void aGetXAConnectionOverlappingCloseFailsClosedOrIsClosedByIt() throws Exception {
        AffinityXADataSource ds = ds("xa-close-race");
        XaRouter router = ds.getRouter();
        CountDownLatch inConnect = new CountDownLatch(1);
        CountDownLatch closed = new CountDownLatch(1);
        router.connectHook = () -> {
            inConnect.countDown();
            try {
                closed.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        };
        CompletableFuture<Object> get = CompletableFuture.supplyAsync(() -> {
            try {
                return ds.getXAConnection();
            } catch (SQLException e) {
                return e;
            }
        });
        assertTrue(inConnect.await(10, TimeUnit.SECONDS), "getXAConnection reached its registration");
        ds.close();
        closed.countDown();
        Object out = get.get(10, TimeUnit.SECONDS);
        router.connectHook = null;
        if (out instanceof SQLException e) {
            assertEquals("08003", e.getSQLState(), "a closed error: " + e);
            return;
        }
        XAConnection c = xa.track((XAConnection) out);
        SQLException e = assertThrows(SQLException.class, c::getXAResource,
                "the XAConnection escaped close(): it works through the closed data source");
        assertEquals("08003", e.getSQLState());
    }

    @Test
    void closeDoesNotWaitOnABranchHungOnABlackholedNode() throws Exception {
        AffinityXADataSource ds = ds("xa-close-blackhole");
        String run = UUID.randomUUID().toString();
        XAConnection c = xa.connect(ds);
        Connection h = c.getConnection();
        Xid x = XaSupport.xid(1);
        XAResource r = c.getXAResource();
        XaSupport.startOn(ds, "RAC3", r, x);
        insert(h, run);
        Faults.blackhole(3);
        CompletableFuture<Object> hung = CompletableFuture.supplyAsync(() -> {
            try (Statement s = h.createStatement()) {
                return s.execute("SELECT 1");
            } catch (SQLException ex) {
                return ex;
            }
        });
        assertThrows(TimeoutException.class, () -> hung.get(500, TimeUnit.MILLISECONDS), "blackholed");
        long t0 = System.nanoTime();
        CompletableFuture<Void> closing = CompletableFuture.runAsync(ds::close);
        closing.get(10, TimeUnit.SECONDS);
        Object out = hung.get(10, TimeUnit.SECONDS);
        assertTrue(out instanceof SQLException, "the hung call ended with an error: " + out);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(ms < 8_000, "close and the hung call ended in " + ms + " ms, not at the socket timeout");
        XAException e = assertThrows(XAException.class, () -> r.end(x, XAResource.TMSUCCESS));
        assertEquals(XAException.XAER_RMFAIL, e.errorCode, "the XAConnection is closed: " + e.getMessage());
    }
}
