package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.test.SlowToUnwind;
import io.racaffinity.test.Stubs;
import io.racaffinity.test.Threads;
import java.sql.SQLTransientConnectionException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * Once close() returns, no thread the data source started is left, as HikariCP's close() awaits its
 * housekeeping executor: an application server undeploying one application checks for its threads right
 * after, while other clusters (another application's, over a library in the server's lib/) stay open.
 */
class CloseLeavesNoThreadsTest {
    private static List<String> threadsOf(String cluster) {
        return Threads.describe(Threads.of(cluster));
    }

    /**
     * The heartbeat's probe is connecting when close() comes: the interrupt ends the connect, which (as a
     * driver closing its socket) takes a moment more. Another cluster stays open, so the library's wait for
     * its threads at the last cluster's close does not apply.
     */
    @Test
    void noHeartbeatThreadOutlivesCloseWhileAnotherClusterIsOpen() throws Exception {
        CountDownLatch probing = new CountDownLatch(1);
        DataSource slow = Stubs.proxy(DataSource.class, "SlowNode", (p, m, a) -> {
            if (!m.getName().equals("getConnection")) {
                return null;
            }
            probing.countDown();
            SlowToUnwind.untilInterrupted(300);
            throw new SQLTransientConnectionException("interrupted", "08001");
        });
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("A", slow);
        try (Cluster other = Cluster.fromConfig("name = closethreads-other; nodes = X")) {
            AffinityDataSource ds = new AffinityDataSource();
            ds.setConfig("name = closethreads; nodes = A");
            ds.setNodeDataSources(nodes);
            ds.setHeartbeatIntervalMillis(10);
            ds.setRegisterMBean(false);
            ds.init();
            assertTrue(probing.await(30, TimeUnit.SECONDS), "the heartbeat never probed");
            assertFalse(threadsOf("closethreads").isEmpty(), "the heartbeat's threads are named after the cluster");
            ds.close();
            assertEquals(List.of(), threadsOf("closethreads"), "threads left running after close()");
        }
    }
    /**
     * The pool upkeep's thread is in the application's partition-map loader when close() comes: the loader's
     * call (a query on a node) unwinds once interrupted. Another cluster stays open.
     */
    @Test
    void noUpkeepThreadOutlivesCloseWhileTheLoaderRuns() throws Exception {
        CountDownLatch loading = new CountDownLatch(1);
        Map<Integer, String> map = Map.of(0, "A");
        PartitionMapLoader loader = () -> {
            if (!Thread.currentThread().getName().startsWith("racaffinity-pools-")) {
                return map; // the load at init, on the caller's thread
            }
            loading.countDown();
            SlowToUnwind.untilInterrupted(300);
            return map;
        };
        DataSource node = Stubs.proxy(DataSource.class, "Node", (p, m, a) -> null);
        Map<String, DataSource> nodes = new LinkedHashMap<>();
        nodes.put("A", node);
        try (Cluster other = Cluster.fromConfig("name = closeloader-other; nodes = X")) {
            AffinityDataSource ds = new AffinityDataSource();
            ds.setConfig("name = closeloader; nodes = A; data.partitions = 1");
            ds.setNodeDataSources(nodes);
            ds.setPartitionMapLoader(loader);
            ds.setPartitionMapReloadMillis(10);
            ds.setPoolMaintenanceMillis(10);
            ds.setRegisterMBean(false);
            ds.init();
            try {
                assertTrue(loading.await(30, TimeUnit.SECONDS), "the upkeep never ran the loader");
            } finally {
                ds.close();
            }
            assertEquals(List.of(), threadsOf("closeloader"), "threads left running after close()");
        }
    }
}
