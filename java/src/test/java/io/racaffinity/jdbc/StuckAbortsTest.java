package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.CloseDeadlineTest.BOUND_MILLIS;
import static io.racaffinity.jdbc.CloseDeadlineTest.abortCounting;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.NodeState;
import io.racaffinity.test.Pools;
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
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
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
}
