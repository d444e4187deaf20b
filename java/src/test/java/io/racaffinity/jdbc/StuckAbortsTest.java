package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.CloseDeadlineTest.BOUND_MILLIS;
import static io.racaffinity.jdbc.CloseDeadlineTest.abortCounting;
import static io.racaffinity.jdbc.CloseDeadlineTest.stuckUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.NodeState;
import io.racaffinity.test.Pools;
import io.racaffinity.test.Stubs;
import io.racaffinity.test.Threads;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.Test;

/**
 * Several connections in use on one node whose driver blocks in {@code abort} (a socket stuck in a
 * write, which the close behind an abort waits for): a hard Down and {@code close()} reach every one
 * of them within one bound, not one after the other.
 */
class StuckAbortsTest {
    /** A data source over stub nodes A (every abort blocks until {@code release}) and B, round robin. */
    private static AffinityDataSource dataSource(String name, CountDownLatch release, AtomicInteger abortsA,
            AtomicInteger abortsB) {
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("A", abortCounting("A", release, abortsA));
        nodes.put("B", abortCounting("B", null, abortsB));
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; nodes = A, B; policy = round_robin; thread.auto_pin = false");
        ds.setNodeDataSources(nodes);
        ds.setRegisterMBean(false);
        ds.setHeartbeatIntervalMillis(0);
        ds.setPoolMaintenanceMillis(10);
        return ds;
    }

    /** Borrows until {@code onA} connections are in use on A and one on B; gives the others back. */
    private static List<Connection> inUse(AffinityDataSource ds, int onA) throws SQLException {
        List<Connection> a = new ArrayList<>();
        List<Connection> b = new ArrayList<>();
        for (int i = 0; i < 4 * onA && (a.size() < onA || b.isEmpty()); i++) {
            Connection c = ds.getConnection();
            List<Connection> to = ((AffinityConnection) c).nodeName().equals("A") ? a : b;
            if (to == b && !b.isEmpty() || to == a && a.size() == onA) {
                c.close();
            } else {
                to.add(c);
            }
        }
        assertEquals(onA, a.size(), "in use on A");
        assertEquals(1, b.size(), "in use on B");
        a.addAll(b);
        return a;
    }

    @Test
    void aHardDownReachesEveryConnectionInUseOnItsNodeThoughEachAbortBlocks() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger abortsA = new AtomicInteger();
        AtomicInteger abortsB = new AtomicInteger();
        AffinityDataSource ds = dataSource("stuckdown", release, abortsA, abortsB);
        try {
            inUse(ds, 3);
            ds.getCluster().setNodeState("A", NodeState.DOWN); // a failure: what is in use there is aborted
            assertTrue(Pools.await(Duration.ofMillis(BOUND_MILLIS), () -> abortsA.get() == 3),
                    "A's connections in use whose abort began: " + abortsA.get() + " of 3");
            // The upkeep acts on the next Down though A's aborts are still stuck in the driver.
            ds.getCluster().setNodeState("B", NodeState.DOWN);
            assertTrue(Pools.await(Duration.ofMillis(BOUND_MILLIS), () -> abortsB.get() == 1),
                    "B's connection in use aborted while A's aborts are stuck");
        } finally {
            release.countDown();
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of("stuckdown").isEmpty()),
                "released, the aborting threads end: " + Threads.describe(Threads.of("stuckdown")));
    }

    @Test
    void closeReachesEveryConnectionInUseOnANodeThoughEachAbortBlocks() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger abortsA = new AtomicInteger();
        AtomicInteger abortsB = new AtomicInteger();
        AffinityDataSource ds = dataSource("stuckclose", release, abortsA, abortsB);
        try {
            inUse(ds, 3);
            long start = System.nanoTime();
            ds.close();
            long tookMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(tookMillis < BOUND_MILLIS, "close() took " + tookMillis + " ms");
            assertEquals(3, abortsA.get(), "A's connections in use whose abort began within close()");
            assertEquals(1, abortsB.get(), "B's connection in use aborted");
        } finally {
            release.countDown();
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of("stuckclose").isEmpty()),
                "released, the aborting threads end: " + Threads.describe(Threads.of("stuckclose")));
    }

    // ---- AffinityXADataSource: the sessions its XAConnections hold on a node ----------------------

    /**
     * A node XADataSource whose sessions, once {@code stuck} is set, block in their driver's abort (and the
     * XAConnection's close) whatever the interrupts until {@code release} opens, as on a socket stuck in a write;
     * {@code ends} counts the aborts and XAConnection closes begun while stuck (each session's first end).
     */
    private static XADataSource stuckXa(String name, AtomicBoolean stuck, CountDownLatch release,
            AtomicInteger ends) {
        return Stubs.proxy(XADataSource.class, "StuckXADataSource[" + name + "]", (p, m, a) -> {
            if (!m.getName().equals("getXAConnection")) {
                Class<?> r = m.getReturnType();
                return r == int.class ? 0 : null;
            }
            AtomicBoolean ended = new AtomicBoolean();
            Runnable end = () -> {
                if (stuck.get() && ended.compareAndSet(false, true)) {
                    ends.incrementAndGet();
                    if (release != null) {
                        stuckUntil(release);
                    }
                }
            };
            XAResource xar = Stubs.proxy(XAResource.class, "StubXAResource[" + name + "]", (p2, m2, a2) -> {
                Class<?> r = m2.getReturnType();
                return r == boolean.class ? false : r == int.class ? 0 : r == Xid[].class ? new Xid[0] : null;
            });
            return Stubs.proxy(XAConnection.class, "StuckXAConnection[" + name + "]", (p2, m2, a2) -> {
                switch (m2.getName()) {
                    case "getConnection": {
                        boolean[] closed = {false};
                        return Stubs.proxy(Connection.class, "StuckSession[" + name + "]", (p3, m3, a3) -> {
                            switch (m3.getName()) {
                                case "abort":
                                    end.run();
                                    closed[0] = true;
                                    return null;
                                case "close":
                                    closed[0] = true;
                                    return null;
                                case "isClosed":
                                    return closed[0];
                                case "isValid":
                                    return !closed[0];
                                default:
                                    Class<?> r = m3.getReturnType();
                                    return r == boolean.class ? false : r == int.class ? 0 : null;
                            }
                        });
                    }
                    case "getXAResource":
                        return xar;
                    case "close":
                        end.run();
                        return null;
                    default:
                        return null;
                }
            });
        });
    }

    /** An XA data source over stub nodes A (stuck once {@code stuck} is set) and B, round robin. */
    private static AffinityXADataSource xaDataSource(String name, AtomicBoolean stuck, CountDownLatch release,
            AtomicInteger endsA, AtomicInteger endsB) {
        Map<String, XADataSource> nodes = new LinkedHashMap<>();
        nodes.put("A", stuckXa("A", stuck, release, endsA));
        nodes.put("B", stuckXa("B", stuck, null, endsB));
        AffinityXADataSource ds = new AffinityXADataSource();
        ds.setConfig("name = " + name + "; nodes = A, B; policy = round_robin; thread.auto_pin = false");
        ds.setNodeXADataSources(nodes);
        ds.setRegisterMBean(false);
        ds.setHeartbeatIntervalMillis(0);
        return ds;
    }

    /**
     * Opens XAConnections until {@code onA} hold a session on A and one on B (each through a handle, kept open
     * if {@code handles}, else closed: a session the TM's pure XA calls use); closes the others.
     */
    private static List<XAConnection> sessions(AffinityXADataSource ds, int onA, boolean handles)
            throws SQLException {
        List<XAConnection> a = new ArrayList<>();
        List<XAConnection> b = new ArrayList<>();
        for (int i = 0; i < 4 * onA && (a.size() < onA || b.isEmpty()); i++) {
            XAConnection c = ds.getXAConnection();
            Connection h = c.getConnection();
            h.isReadOnly(); // binds the handle and opens its session
            String node = ((io.racaffinity.xa.AffinityXAConnection) c).boundNodeName();
            if (!handles) {
                h.close();
            }
            List<XAConnection> to = "A".equals(node) ? a : b;
            if (to == b && !b.isEmpty() || to == a && a.size() == onA) {
                c.close();
            } else {
                to.add(c);
            }
        }
        assertEquals(onA, a.size(), "XAConnections with a session on A");
        assertEquals(1, b.size(), "XAConnections with a session on B");
        a.addAll(b);
        return a;
    }

    private static void xaHardDown(String name, boolean handles) throws Exception {
        AtomicBoolean stuck = new AtomicBoolean();
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger endsA = new AtomicInteger();
        AtomicInteger endsB = new AtomicInteger();
        AffinityXADataSource ds = xaDataSource(name, stuck, release, endsA, endsB);
        try {
            sessions(ds, 3, handles);
            stuck.set(true);
            ds.getCluster().setNodeState("A", NodeState.DOWN); // a failure: every session there is aborted
            assertTrue(Pools.await(Duration.ofMillis(BOUND_MILLIS), () -> endsA.get() == 3),
                    "A's sessions whose abort began: " + endsA.get() + " of 3");
            // The upkeep acts on the next Down though A's aborts are still stuck in the driver.
            ds.getCluster().setNodeState("B", NodeState.DOWN);
            assertTrue(Pools.await(Duration.ofMillis(BOUND_MILLIS), () -> endsB.get() == 1),
                    "B's session aborted while A's aborts are stuck");
        } finally {
            release.countDown();
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of(name).isEmpty()),
                "released, the aborting threads end: " + Threads.describe(Threads.of(name)));
    }

    @Test
    void anXaHardDownReachesEverySessionInUseOnItsNodeThoughEachAbortBlocks() throws Exception {
        xaHardDown("xastuckdown", true);
    }

    /** Sessions the TM's pure XA calls use (no handle open): aborted through a new handle of each. */
    @Test
    void anXaHardDownReachesEverySessionWithNoHandleOnItsNodeThoughEachAbortBlocks() throws Exception {
        xaHardDown("xastuckidle", false);
    }

    private static void xaClose(String name, boolean handles) throws Exception {
        AtomicBoolean stuck = new AtomicBoolean();
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger endsA = new AtomicInteger();
        AtomicInteger endsB = new AtomicInteger();
        AffinityXADataSource ds = xaDataSource(name, stuck, release, endsA, endsB);
        try {
            sessions(ds, 3, handles);
            stuck.set(true);
            long start = System.nanoTime();
            ds.close();
            long tookMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(tookMillis < BOUND_MILLIS, "close() took " + tookMillis + " ms");
            assertEquals(3, endsA.get(), "A's sessions whose end began within close()");
            assertEquals(1, endsB.get(), "B's session ended");
        } finally {
            release.countDown();
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of(name).isEmpty()),
                "released, the ending threads end: " + Threads.describe(Threads.of(name)));
    }

    @Test
    void anXaCloseReachesEverySessionInUseOnANodeThoughEachAbortBlocks() throws Exception {
        xaClose("xastuckclose", true);
    }

    @Test
    void anXaCloseReachesEverySessionWithNoHandleOnANodeThoughEachCloseBlocks() throws Exception {
        xaClose("xastuckcloseidle", false);
    }

    /**
     * One XAConnection whose handle worked on A outside a branch, then in a branch on B: close() ends its session
     * on B though the abort of its session on A blocks.
     */
    @Test
    void anXaCloseEndsAnXaConnectionsOtherSessionsThoughItsAbortOnOneNodeBlocks() throws Exception {
        AtomicBoolean stuck = new AtomicBoolean();
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger endsA = new AtomicInteger();
        AtomicInteger endsB = new AtomicInteger();
        AffinityXADataSource ds = xaDataSource("xastucktwo", stuck, release, endsA, endsB);
        try {
            io.racaffinity.xa.AffinityXAConnection c = null;
            Connection h = null;
            for (int i = 0; i < 8 && c == null; i++) {
                XAConnection x = ds.getXAConnection();
                Connection hx = x.getConnection();
                hx.isReadOnly(); // outside a branch: bound to the node balancing gives
                if ("A".equals(((io.racaffinity.xa.AffinityXAConnection) x).boundNodeName())) {
                    c = (io.racaffinity.xa.AffinityXAConnection) x;
                    h = hx;
                } else {
                    x.close();
                }
            }
            assertTrue(c != null, "a handle on A");
            XAResource r = c.getXAResource();
            for (int i = 0; i < 16 && !"B".equals(c.boundNodeName()); i++) {
                Xid x = xid(i);
                r.start(x, XAResource.TMNOFLAGS);
                if (!"B".equals(c.boundNodeName())) {
                    r.end(x, XAResource.TMSUCCESS);
                    r.rollback(x);
                }
            }
            assertEquals("B", c.boundNodeName(), "a branch on B");
            h.isReadOnly(); // the handle's work in the branch: its session on B
            assertEquals(2, c.physicalConnections(), "sessions on A and B");
            stuck.set(true);
            long start = System.nanoTime();
            ds.close();
            long tookMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(tookMillis < BOUND_MILLIS, "close() took " + tookMillis + " ms");
            assertEquals(1, endsA.get(), "the session on A: its abort began");
            assertEquals(1, endsB.get(), "the branch's session on B ended within close()");
        } finally {
            release.countDown();
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of("xastucktwo").isEmpty()),
                "released, the ending threads end: " + Threads.describe(Threads.of("xastucktwo")));
    }

    private static Xid xid(int i) {
        byte[] g = ("xastucktwo-" + i).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        return Stubs.proxy(Xid.class, "Xid[" + i + "]", (p, m, a) -> switch (m.getName()) {
            case "getFormatId" -> 1;
            case "getGlobalTransactionId" -> g.clone();
            default -> new byte[] {1};
        });
    }
}
