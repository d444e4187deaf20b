package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.test.Stubs;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;

/**
 * The heartbeat's counting of a probe still running at the next tick. It counts as a miss, so a pool
 * blocked on a dead host cannot hold detection back; but the first probe of a node opens its pool's first
 * connection, which on a cold, busy JVM can take longer than misses × interval: counting that one marked
 * a healthy node Down at start-up (the Tomcat continuity run's cold start, docs/continuity.md).
 */
class HeartbeatTest {
    /** What the heartbeats log, as a data source's log thread would write it. */
    private static final AsyncLog LOG = new AsyncLog(System.getLogger("io.racaffinity.jdbc.Heartbeat"), "HeartbeatTest",
            "racaffinity-log-HeartbeatTest");

    @AfterAll
    static void closeLog() {
        LOG.close();
    }

    private static final long INTERVAL_MS = 50;

    /** A node whose connections take {@code delays[i]} ms for the i-th getConnection (the last one after). */
    private static final class SlowNode {
        final long[] delays;
        final AtomicInteger calls = new AtomicInteger();
        final CountDownLatch release = new CountDownLatch(1);
        volatile boolean blockForever;
        final DataSource dataSource = Stubs.proxy(DataSource.class, "SlowNode", (p, m, a) -> switch (m.getName()) {
            case "getConnection" -> connect();
            case "getLoginTimeout" -> 0;
            case "isWrapperFor" -> false;
            default -> null;
        });

        SlowNode(long... delays) {
            this.delays = delays;
        }

        private Connection connect() throws SQLException {
            int i = calls.getAndIncrement();
            try {
                if (blockForever) {
                    release.await();
                } else {
                    Thread.sleep(delays[Math.min(i, delays.length - 1)]);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new SQLException("interrupted", "08001");
            }
            return Stubs.proxy(Connection.class, "SlowNode connection", (p, m, a) -> switch (m.getName()) {
                case "isValid" -> true;
                case "close" -> null;
                case "isClosed" -> false;
                default -> throw new SQLFeatureNotSupportedException(m.getName());
            });
        }
    }

    private static Heartbeat heartbeat(Cluster c, SlowNode... nodes) {
        DataSource[] sources = java.util.Arrays.stream(nodes).map(n -> n.dataSource).toArray(DataSource[]::new);
        return new Heartbeat("HeartbeatTest", c, sources, INTERVAL_MS, 1, new Redactor(null), false, () -> {}, LOG);
    }

    private static void waitFor(String what, java.util.function.BooleanSupplier ok) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!ok.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, what + ": not within 20 s");
            Thread.sleep(10);
        }
    }

    @Test
    void aSlowFirstConnectionIsNotAMiss() throws Exception {
        // 3 misses of 50 ms: the first probe's 600 ms spans 12 ticks.
        SlowNode a = new SlowNode(600, 0);
        try (Cluster c = Cluster.fromConfig("nodes = A, B\nheartbeat.misses = 3");
                Heartbeat hb = heartbeat(c, a, new SlowNode(0))) {
            // Its first probe done, and a few quick ones after it.
            waitFor("A probed 4 times", () -> a.calls.get() >= 4);
            assertEquals(NodeState.UP, c.nodeState("A"), "a node whose first connection was slow is up");
            assertEquals(NodeState.UP, c.nodeState("B"));
            assertEquals(0, c.nodeMetrics().get(0).probeMisses(), "no miss counted for it");
        }
    }

    @Test
    void aProbeBlockedAfterTheNodeAnsweredStillCountsAsMisses() throws Exception {
        SlowNode a = new SlowNode(0);
        try (Cluster c = Cluster.fromConfig("nodes = A, B\nheartbeat.misses = 3");
                Heartbeat hb = heartbeat(c, a, new SlowNode(0))) {
            waitFor("A probed", () -> a.calls.get() >= 2);
            a.blockForever = true;
            // A pool blocked on a dead host: detection at the configured rate, not at the probe's end.
            waitFor("A down while its probe is still blocked", () -> c.nodeState("A") == NodeState.DOWN);
            assertEquals(NodeState.UP, c.nodeState("B"));
            a.release.countDown();
        }
    }

    @Test
    void aProbeThatCloseInterruptsReportsNoMissToASharedCluster() throws Exception {
        CountDownLatch probing = new CountDownLatch(1);
        AtomicReference<Thread> prober = new AtomicReference<>();
        // A node pool a probe waits on when the data source closes; the cluster is the application's
        // (shared with another data source), so it outlives this heartbeat.
        DataSource stuck = Stubs.proxy(DataSource.class, "StuckNode", (p, m, a) -> {
            if (!m.getName().equals("getConnection")) {
                return null;
            }
            prober.set(Thread.currentThread());
            probing.countDown();
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                throw new SQLException("Interrupted during connection acquisition", "08001");
            }
            throw new AssertionError("the probe was not interrupted");
        });
        try (Cluster c = Cluster.fromConfig("name = hbclose; nodes = A, B\nheartbeat.misses = 1")) {
            // 30 s of probe timeout: the first probe is no miss while it runs.
            Heartbeat hb = new Heartbeat("HeartbeatTest", c, new DataSource[] {stuck, null}, INTERVAL_MS, 30,
                    new Redactor(null), false, () -> {}, LOG);
            assertTrue(probing.await(20, TimeUnit.SECONDS), "probing");
            hb.close();
            // Its pool thread ends with the task, once the probe has reported (or not).
            prober.get().join(20_000);
            assertFalse(prober.get().isAlive(), "the probe ended");
            assertEquals(0, c.nodeMetrics().get(0).probeMisses(), "a closed heartbeat counted a miss");
            assertEquals(NodeState.UP, c.nodeState("A"));
        }
    }

    /**
     * A node removed at run time (the feed's {@code removed} record, {@link Cluster#removeNode}) is no longer
     * probed: the core ignores its probes, and each one opened a connection to a node the fleet took out.
     */
    @Test
    void aRemovedNodeIsNoLongerProbed() throws Exception {
        SlowNode a = new SlowNode(0);
        SlowNode b = new SlowNode(0);
        try (Cluster c = Cluster.fromConfig("nodes = A, B");
                Heartbeat hb = heartbeat(c, a, b)) {
            waitFor("B probed", () -> b.calls.get() >= 2);
            c.removeNode("B");
            int atRemoval = b.calls.get();
            int aBefore = a.calls.get();
            waitFor("A probed 10 times more", () -> a.calls.get() >= aBefore + 10);
            // A tick that read the node set before the removal may still start one probe of B, however late
            // its thread runs (no sleep can wait for it); a later tick reads B gone. So one at most.
            assertTrue(b.calls.get() <= atRemoval + 1,
                    "probes of removed node B over 10 of A's: " + (b.calls.get() - atRemoval) + " begun after its removal");
        }
    }
}
