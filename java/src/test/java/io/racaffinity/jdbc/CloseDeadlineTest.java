package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.Pools;
import io.racaffinity.test.RollbackOnlyTm;
import io.racaffinity.test.SlowToUnwind;
import io.racaffinity.test.Stubs;
import io.racaffinity.test.Threads;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import javax.sql.DataSource;
import javax.sql.XAConnection;
import javax.sql.XADataSource;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.junit.jupiter.api.Test;

/**
 * close() is bounded once, not once per part: when several parts of a data source are stuck at once (a TM, a driver
 * and an application's partition-map loader that ignore the interrupt, a log handler that blocks), each used to get
 * its own wait of 1 to 2 s one after the other, and close() took about 7 s. An application
 * server undeploying an application waits on that close.
 */
class CloseDeadlineTest {
    /** Generous against a loaded machine: the data source's own bound is 2 s. */
    static final long BOUND_MILLIS = 2_500;

    /** Blocks the calling thread, whatever its interrupts, until {@code release} opens. */
    static void stuckUntil(CountDownLatch release) {
        boolean interrupted = false;
        while (true) {
            try {
                if (release.await(60, TimeUnit.SECONDS)) {
                    break;
                }
            } catch (InterruptedException e) {
                interrupted = true; // ignored, as a driver stuck in a socket read may
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * The log writer's handler blocks (a full pipe) until interrupted, then takes a moment to unwind: the one
     * part here that can end, and must have ended when close() returns.
     */
    private static final class BlockingHandler extends Handler {
        final CountDownLatch held = new CountDownLatch(1);

        @Override
        public void publish(LogRecord r) {
            if (!Thread.currentThread().getName().startsWith("racaffinity-log-closedeadline")
                    || r.getMessage() == null || !r.getMessage().contains("heartbeat of node A missed")) {
                return;
            }
            held.countDown();
            SlowToUnwind.untilInterrupted(200);
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
    }

    @Test
    void closeWithATmADriverALoaderAndALogHandlerStuckReturnsWithinOneBound() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        CountDownLatch probing = new CountDownLatch(1);
        CountDownLatch loading = new CountDownLatch(1);
        // The application's connections come from a stub; the heartbeat's probes fail (A) or hang (B).
        DataSource app = Stubs.dataSource("app", Map.of(), new AtomicInteger());
        DataSource failing = Stubs.proxy(DataSource.class, "FailingNode", (p, m, a) -> {
            if (!Thread.currentThread().getName().startsWith("racaffinity-probe-")) {
                return Stubs.forward(app, m, a);
            }
            if (m.getName().equals("getConnection")) {
                throw new SQLTransientConnectionException("refused", "08001");
            }
            return null;
        });
        DataSource stuck = Stubs.proxy(DataSource.class, "StuckNode", (p, m, a) -> {
            if (!Thread.currentThread().getName().startsWith("racaffinity-probe-")) {
                return Stubs.forward(app, m, a);
            }
            if (m.getName().equals("getConnection")) {
                probing.countDown();
                stuckUntil(release);
                throw new SQLTransientConnectionException("released", "08001");
            }
            return null;
        });
        // A transaction whose TM takes no synchronization (Narayana's rollback-only): the sweeper follows it.
        RollbackOnlyTm tm = new RollbackOnlyTm("tx-closedeadline");
        CountDownLatch sweeping = new CountDownLatch(1);
        tm.onSweep(() -> {
            sweeping.countDown();
            stuckUntil(release);
        });
        Map<Integer, String> map = Map.of(0, "A");
        PartitionMapLoader loader = () -> {
            if (Thread.currentThread().getName().startsWith("racaffinity-pools-")) {
                loading.countDown();
                stuckUntil(release);
            }
            return map;
        };
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("A", failing);
        nodes.put("B", stuck);
        Logger jul = Logger.getLogger("io.racaffinity");
        Level before = jul.getLevel();
        BlockingHandler handler = new BlockingHandler();
        jul.setLevel(Level.ALL);
        jul.addHandler(handler);
        AffinityDataSource ds = new AffinityDataSource();
        try {
            ds.setConfig("name = closedeadline; nodes = A, B; data.partitions = 1");
            ds.setNodeDataSources(nodes);
            ds.setHeartbeatIntervalMillis(10);
            ds.setPartitionMapLoader(loader);
            ds.setPartitionMapReloadMillis(10);
            ds.setPoolMaintenanceMillis(10);
            ds.setRegisterMBean(false);
            ds.setTransactionSynchronizationRegistry(tm.registry());
            ds.setTransactionManager(tm.manager());
            ds.init();
            try (Connection c = ds.getConnection()) {
                c.isValid(1); // in a transaction the TM takes no synchronization for: the sweeper follows it
            }
            assertTrue(sweeping.await(30, TimeUnit.SECONDS), "the sweeper never asked the TM");
            assertTrue(probing.await(30, TimeUnit.SECONDS), "the heartbeat never probed B");
            assertTrue(loading.await(30, TimeUnit.SECONDS), "the upkeep never ran the loader");
            assertTrue(handler.held.await(30, TimeUnit.SECONDS), "the log writer never published A's miss");

            long start = System.nanoTime();
            ds.close();
            long tookMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);

            assertTrue(tookMillis < BOUND_MILLIS, "close() took " + tookMillis + " ms");
            // The stuck probe, loader and sweep cannot end before they are released; every other thread has.
            assertEquals(List.of(), Threads.describe(Threads.of("closedeadline").stream()
                    .filter(t -> !t.getName().startsWith("racaffinity-probe-closedeadline")
                            && !t.getName().startsWith("racaffinity-pools-closedeadline")
                            && !t.getName().startsWith("racaffinity-jta-sweep-closedeadline")).toList()),
                    "threads that could end are left running after close()");
        } finally {
            release.countDown();
            ds.close();
            jul.removeHandler(handler);
            jul.setLevel(before);
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of("closedeadline").isEmpty()),
                "released, the stuck threads end: " + Threads.describe(Threads.of("closedeadline")));
    }

    /**
     * A node XADataSource whose first session blocks in its driver's abort and close (the connection's and the
     * XAConnection's), whatever its interrupts, until {@code release} opens, as a driver may on a dead node; the
     * heartbeat's probes and every later session answer at once.
     */
    private static XADataSource blockingXa(CountDownLatch release, CountDownLatch ending) {
        AtomicInteger sessions = new AtomicInteger();
        return Stubs.proxy(XADataSource.class, "BlockingXADataSource", (p, m, a) -> {
            if (!m.getName().equals("getXAConnection")) {
                Class<?> r = m.getReturnType();
                return r == int.class ? 0 : null;
            }
            boolean blocks = !Thread.currentThread().getName().startsWith("racaffinity-")
                    && sessions.incrementAndGet() == 1;
            boolean[] closed = {false};
            Runnable end = () -> {
                if (blocks) {
                    ending.countDown();
                    stuckUntil(release);
                }
                closed[0] = true;
            };
            Connection session = Stubs.proxy(Connection.class, "BlockingSession", (p2, m2, a2) -> switch (m2.getName()) {
                case "abort", "close" -> {
                    end.run();
                    yield null;
                }
                case "isClosed" -> closed[0];
                case "isValid" -> !closed[0];
                default -> {
                    Class<?> r = m2.getReturnType();
                    yield r == boolean.class ? false : r == int.class ? 0 : null;
                }
            });
            XAResource xar = Stubs.proxy(XAResource.class, "StubXAResource", (p2, m2, a2) -> {
                Class<?> r = m2.getReturnType();
                return r == boolean.class ? false : r == int.class ? 0 : r == Xid[].class ? new Xid[0] : null;
            });
            return Stubs.proxy(XAConnection.class, "BlockingXAConnection", (p2, m2, a2) -> switch (m2.getName()) {
                case "getConnection" -> session;
                case "getXAResource" -> xar;
                case "close" -> {
                    end.run();
                    yield null;
                }
                default -> null;
            });
        });
    }

    /**
     * AffinityXADataSource.close() ends the XAConnections still open: it aborted and closed their sessions on its
     * own thread with no bound, so a node driver that blocks there (ignoring the interrupt) held close() for as
     * long, beyond the bound the data source's other parts keep.
     */
    @Test
    void xaCloseWithANodeDriverStuckInAbortAndCloseReturnsWithinTheBound() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        CountDownLatch ending = new CountDownLatch(1);
        AffinityXADataSource ds = new AffinityXADataSource();
        CompletableFuture<Long> closing = null;
        try {
            ds.setConfig("name = xaclosedeadline; nodes = A");
            ds.setNodeXADataSources(Map.of("A", blockingXa(release, ending)));
            ds.setRegisterMBean(false);
            XAConnection stuck = ds.getXAConnection();
            Connection stuckHandle = stuck.getConnection();
            stuckHandle.isReadOnly(); // opens its session on A: the one that blocks
            XAConnection other = ds.getXAConnection();
            other.getConnection().isReadOnly(); // a session that ends at once

            closing = timed(ds::close);
            Long tookMillis = within10s(closing);

            assertTrue(ending.await(0, TimeUnit.SECONDS), "close() never ended the stuck session");
            assertTrue(tookMillis != null && tookMillis < BOUND_MILLIS,
                    "close() took " + (tookMillis == null ? "more than 10 s" : tookMillis + " ms"));
            SQLException e = assertThrows(SQLException.class, other::getXAResource,
                    "the other XAConnection works on through the closed data source");
            assertEquals("08003", e.getSQLState());
            // The stuck one is ended too, though its driver's abort has not returned: the TM's next call on it
            // answers that it is closed, and its handle takes no more work.
            e = assertThrows(SQLException.class, stuck::getXAResource,
                    "the XAConnection whose abort is stuck works on through the closed data source");
            assertEquals("08003", e.getSQLState());
            e = assertThrows(SQLException.class, stuckHandle::isReadOnly, "its handle works on");
            assertTrue(e.getSQLState().startsWith("08"), "SQLState " + e.getSQLState());
            // The stuck abort cannot end before it is released; every other thread has.
            assertEquals(List.of(), Threads.describe(Threads.of("xaclosedeadline").stream()
                    .filter(t -> !isStuck(t)).toList()),
                    "threads that could end are left running after close()");
        } finally {
            release.countDown();
            if (closing != null) {
                closing.get(10, TimeUnit.SECONDS);
            }
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of("xaclosedeadline").isEmpty()),
                "released, the stuck thread ends: " + Threads.describe(Threads.of("xaclosedeadline")));
    }

    /**
     * A node DataSource whose connections block in their driver's abort, whatever its interrupts, until
     * {@code release} opens (a driver on a dead node), counting the aborts in {@code aborts}.
     */
    static DataSource abortCounting(String name, CountDownLatch release, AtomicInteger aborts) {
        DataSource node = Stubs.dataSource(name, Map.of(), new AtomicInteger());
        return Stubs.proxy(DataSource.class, "AbortNode[" + name + "]", (p, m, a) -> {
            Object out = Stubs.forward(node, m, a);
            if (!(out instanceof Connection real)) {
                return out;
            }
            return Stubs.proxy(Connection.class, "AbortConnection[" + name + "]", (p2, m2, a2) -> {
                if (m2.getName().equals("abort")) {
                    aborts.incrementAndGet();
                    if (release != null) {
                        stuckUntil(release);
                    }
                    return null;
                }
                return Stubs.forward(real, m2, a2);
            });
        });
    }

    /**
     * AffinityDataSource.close() aborts the connections still in use: it called each node driver's abort on its
     * own thread, one after the other, with no bound, so a driver that blocks there held close() for as long,
     * and the other nodes' connections were not aborted meanwhile.
     */
    @Test
    void closeWithANodeDriverStuckInAbortReturnsWithinTheBound() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger abortsA = new AtomicInteger();
        AtomicInteger abortsB = new AtomicInteger();
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("A", abortCounting("A", release, abortsA));
        nodes.put("B", abortCounting("B", null, abortsB));
        AffinityDataSource ds = new AffinityDataSource();
        CompletableFuture<Long> closing = null;
        try {
            ds.setConfig("name = closeabort; nodes = A, B; policy = round_robin; thread.auto_pin = false");
            ds.setNodeDataSources(nodes);
            ds.setRegisterMBean(false);
            Map<String, Connection> inUse = new LinkedHashMap<>();
            for (int i = 0; i < 10 && inUse.size() < 2; i++) {
                Connection c = ds.getConnection();
                if (inUse.putIfAbsent(((AffinityConnection) c).nodeName(), c) != null) {
                    c.close();
                }
            }
            assertEquals(List.of("A", "B"), inUse.keySet().stream().sorted().toList(), "one in use on each node");

            closing = timed(ds::close);
            Long tookMillis = within10s(closing);

            assertEquals(1, abortsA.get(), "close() aborts A's connection");
            assertTrue(tookMillis != null && tookMillis < BOUND_MILLIS,
                    "close() took " + (tookMillis == null ? "more than 10 s" : tookMillis + " ms"));
            assertEquals(1, abortsB.get(), "B's connection in use is aborted too");
            assertEquals(List.of(), Threads.describe(Threads.of("closeabort").stream()
                    .filter(t -> !isStuck(t)).toList()),
                    "threads that could end are left running after close()");
        } finally {
            release.countDown();
            if (closing != null) {
                closing.get(10, TimeUnit.SECONDS);
            }
            ds.close();
        }
        assertTrue(Pools.await(Duration.ofSeconds(10), () -> Threads.of("closeabort").isEmpty()),
                "released, the stuck thread ends: " + Threads.describe(Threads.of("closeabort")));
    }

    /** Runs {@code close} on another thread: the future answers how long it took, in ms. */
    private static CompletableFuture<Long> timed(Runnable close) {
        return CompletableFuture.supplyAsync(() -> {
            long start = System.nanoTime();
            close.run();
            return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        });
    }

    /** How long {@code closing} took, in ms; null when it has not returned within 10 s. */
    private static Long within10s(CompletableFuture<Long> closing) throws Exception {
        try {
            return closing.get(10, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            return null;
        }
    }

    /** Whether {@code t} is in {@link #stuckUntil} (the test's blocking driver). */
    static boolean isStuck(Thread t) {
        for (StackTraceElement f : t.getStackTrace()) {
            if (f.getClassName().equals(CloseDeadlineTest.class.getName()) && f.getMethodName().equals("stuckUntil")) {
                return true;
            }
        }
        return false;
    }
}
