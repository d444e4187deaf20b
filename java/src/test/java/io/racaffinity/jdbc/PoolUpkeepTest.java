package io.racaffinity.jdbc;

import static io.racaffinity.test.Pools.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.SQLException;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The pool upkeep thread outlives whatever the application's partition-map
 * loader does: odd failures, and loads that hang.
 */
@ExtendWith(PgNodes.class)
class PoolUpkeepTest {
    static final List<String> NAMES = UcpDrainAndLoaderTest.NAMES;
    static final String APP = UcpDrainAndLoaderTest.APP;
    static final int PARTS = 4;
    private Pools pools;

    @AfterEach
    void close() {
        if (pools != null) {
            pools.close();
        }
    }

    private AffinityDataSource ds(String name) {
        AffinityDataSource ds = pools.affinity("name = " + name
                + "; database = orcl; service = svc; nodes = RAC1, RAC2, RAC3; policy = random; data.partitions = "
                + PARTS);
        ds.setRegisterMBean(false);
        ds.setPoolMaintenanceMillis(50);
        return ds;
    }

    private static Map<Integer, String> allOn(String node) {
        Map<Integer, String> map = new HashMap<>();
        for (int p = 0; p < PARTS; p++) {
            map.put(p, node);
        }
        return map;
    }

    private static boolean keysOn(AffinityDataSource ds, String node) {
        try {
            for (long k = 0; k < 20; k++) {
                if (UcpDrainAndLoaderTest.keyPort(ds, k) != UcpDrainAndLoaderTest.portOf(node)) {
                    return false;
                }
            }
            return true;
        } catch (SQLException e) {
            return false;
        }
    }

    @Test
    void aLoaderFailureTheCoreWouldRefuseAsTextLeavesUpkeepRunning() throws Exception {
        pools = new Pools(NAMES, c -> {
            c.setMinimumIdle(2);
            c.addDataSourceProperty("ApplicationName", APP);
        });
        AtomicReference<String> failWith = new AtomicReference<>();
        AtomicReference<String> owner = new AtomicReference<>("RAC1");
        PartitionMapLoader loader = () -> {
            String message = failWith.get();
            if (message != null) {
                throw new SQLException(message, "08006");
            }
            return allOn(owner.get());
        };
        AffinityDataSource ds = ds("odd-loader");
        ds.setPartitionMapLoader(loader);
        ds.setPartitionMapReloadMillis(50);
        Cluster cluster = ds.getCluster();
        assertTrue(keysOn(ds, "RAC1"));
        assertTrue(await(Duration.ofSeconds(15), () -> UcpDrainAndLoaderTest.serverConns("RAC2") >= 2));

        // A lone surrogate, then a text over the core's string limit: neither stops the upkeep.
        String[][] cases = {{"map \uD800 unreachable", "map \uFFFD unreachable"}, {"x".repeat(2 << 20), "xxxxxxxx"}};
        for (String[] c : cases) {
            failWith.set(c[0]);
            long fails = ds.getPartitionMapLoadFailures();
            assertFalse(ds.reloadPartitionMap(), "a failed load reports false, it does not throw");
            assertTrue(await(Duration.ofSeconds(5), () -> ds.getPartitionMapLoadFailures() >= fails + 3),
                    "periodic loads go on failing and are counted: " + ds.getPartitionMapLoadFailures());
            String json = cluster.metricsJson();
            assertTrue(json.contains(c[1]), json.length() > 2000 ? json.substring(0, 2000) : json);
            assertTrue(ds.getPartitionMapLoadError().length() <= 512, "a sane length");
        }

        // A later good load applies ...
        owner.set("RAC3");
        failWith.set(null);
        assertTrue(await(Duration.ofSeconds(5), () -> ds.getPartitionMapLoadError() == null));
        assertTrue(await(Duration.ofSeconds(5), () -> keysOn(ds, "RAC3")), "the new map applies");
        // ... and a planned drain still empties the node's pool.
        ds.applyEvent(UcpDrainAndLoaderTest.fan("RAC2", "status=down reason=USER drain_timeout=30"));
        assertTrue(await(Duration.ofSeconds(5), () -> UcpDrainAndLoaderTest.serverConns("RAC2") == 0),
                "left: " + UcpDrainAndLoaderTest.serverConns("RAC2"));
    }

    @Test
    void aHungLoaderBlocksNeitherEventsNorClose() throws Exception {
        pools = new Pools(NAMES);
        AtomicBoolean hang = new AtomicBoolean();
        CountDownLatch entered = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        PartitionMapLoader loader = () -> {
            if (hang.get()) {
                entered.countDown();
                // A loader stuck on the network: it does not heed interrupts either.
                while (true) {
                    try {
                        release.await();
                        break;
                    } catch (InterruptedException e) {
                        // keeps waiting
                    }
                }
            }
            return allOn("RAC1");
        };
        AffinityDataSource ds = ds("hung-loader");
        ds.setPartitionMapLoader(loader);
        Cluster cluster = ds.getCluster();
        try {
            hang.set(true);
            // An HA event sends the upkeep thread into the loader, which hangs.
            ds.applyEvent(UcpDrainAndLoaderTest.fan("RAC2", "status=down reason=FAILURE"));
            assertTrue(entered.await(5, TimeUnit.SECONDS), "the HA event ran the loader");
            assertTimeoutPreemptively(Duration.ofSeconds(5), () -> {
                ds.applyEvent(UcpDrainAndLoaderTest.fan("RAC2", "status=up"));
                ds.applyEvent(UcpDrainAndLoaderTest.fan("RAC3", "status=down reason=FAILURE"));
            }, "FAN events wait for no loader");
            assertEquals(NodeState.DOWN, cluster.nodeState("RAC3"));
            assertTimeoutPreemptively(Duration.ofSeconds(5), ds::close, "close() waits a moment at most for a hung loader");
        } finally {
            release.countDown();
        }
    }
}
