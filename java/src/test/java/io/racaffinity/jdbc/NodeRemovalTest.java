package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.AffinityDataSourceTest.portOf;
import static io.racaffinity.jdbc.FcfPools.aborted;
import static io.racaffinity.test.Pools.await;
import static io.racaffinity.test.Pools.serverPort;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * A node removed from the cluster ({@link Cluster#removeNode}; the fleet feed's {@code removed}
 * record applies the same removal) while the pools hold connections on it, against the 3 local
 * PostgreSQL nodes. The pools follow the core's {@link Cluster#nodeDownIsPlanned}: removed while
 * it drained is a planned end (connections in use finish, idle ones close, waiters go
 * elsewhere); removed while Up is not, and the connections in use are aborted as at any hard
 * Down.
 */
@ExtendWith(PgNodes.class)
class NodeRemovalTest {
    static final String APP = "racaff-removal-java";

    private Pools pools;
    private ExecutorService threads;

    @AfterEach
    void close() {
        if (threads != null) {
            threads.shutdownNow();
        }
        if (pools != null) {
            pools.close();
        }
    }

    /** As FastFailoverTest's: {@link FcfPools}' pools changed by {@code tweak}, a data source whose upkeep runs every 50 ms. */
    private AffinityDataSource fcfDataSource(String name, Consumer<HikariConfig> tweak) {
        pools = FcfPools.pools(APP, tweak);
        return FcfPools.dataSource(pools, name, 50);
    }

    private static String fan(String node, String tail) {
        return FcfPools.fan(node, tail);
    }

    /** This test's connections open on a node, as its server counts them. */
    private static int serverConns(String node) {
        return FcfPools.serverConns(APP, node);
    }

    /** Runs a statement in the connection's open transaction: it still works on its node. */
    private static void works(Connection c, int value) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT " + value)) {
            assertTrue(rs.next());
            assertEquals(value, rs.getInt(1));
        }
    }

    private void waitRounds(AffinityDataSource ds, int n, String what) throws InterruptedException {
        long rounds = ds.upkeepRounds();
        assertTrue(await(Duration.ofSeconds(10), () -> ds.upkeepRounds() >= rounds + n), what);
    }

    @Test
    void aNodeRemovedWhileItDrainsLetsItsConnectionInUseFinishAndSendsWaitersElsewhere() throws Exception {
        AffinityDataSource ds = fcfDataSource("removal-drain", c -> {
            if (c.getPoolName().endsWith("MYDB3")) {
                c.setMaximumPoolSize(2);
                c.setMinimumIdle(2);
            }
        });
        Cluster cluster = ds.getCluster();
        int id3 = cluster.nodeId("MYDB3");
        ShardingKey key3 = keyOn(ds, "MYDB3");
        HikariDataSource pool3 = pools.get("MYDB3");
        assertTrue(await(Duration.ofSeconds(15), () -> serverConns("MYDB3") >= 2));

        Connection held = ds.createConnectionBuilder().shardingKey(key3).build();
        Connection held2 = ds.createConnectionBuilder().shardingKey(key3).build();
        try {
            held.setAutoCommit(false);
            assertEquals(portOf("MYDB3"), serverPort(held));
            assertEquals(portOf("MYDB3"), serverPort(held2));
            // Two threads routed to node 3 before its drain wait on its full pool.
            threads = Executors.newFixedThreadPool(2);
            List<Future<Integer>> waiters = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                waiters.add(threads.submit(() -> {
                    try (Connection c = ds.createConnectionBuilder().shardingKey(key3).build()) {
                        return serverPort(c);
                    }
                }));
            }
            assertTrue(await(Duration.ofSeconds(15),
                    () -> pool3.getHikariPoolMXBean().getThreadsAwaitingConnection() == 2), "2 wait on node 3");

            ds.applyEvent(fan("MYDB3", "status=down reason=USER drain_timeout=600"));
            assertEquals(NodeState.DRAINING, cluster.nodeState("MYDB3"));
            waitRounds(ds, 2, "the drain acted on");
            assertEquals(id3, cluster.removeNode("MYDB3"));
            assertEquals(NodeState.DOWN, cluster.nodeState(id3));
            assertTrue(cluster.nodeDownIsPlanned(id3), "the core: removed while draining is planned");

            for (Future<Integer> f : waiters) {
                assertNotEquals(portOf("MYDB3"), f.get(30, TimeUnit.SECONDS), "a waiter served elsewhere");
            }
            waitRounds(ds, 2, "the removal acted on");
            // Returned after the removal: closed, not pooled for a node that is gone.
            held2.close();
            assertFalse(aborted(held), "the connection in use on a node removed while draining works on");
            works(held, 42);
            for (int i = 0; i < 20; i++) {
                try (Connection c = ds.createConnectionBuilder().shardingKey(key3).build()) {
                    assertNotEquals(portOf("MYDB3"), serverPort(c), "new borrows go elsewhere");
                }
            }
            assertTrue(await(Duration.ofSeconds(10), () -> serverConns("MYDB3") == 1),
                    "only the one in use left: " + serverConns("MYDB3"));
            held.commit();
        } finally {
            held.close();
            held2.close();
        }
        assertTrue(await(Duration.ofSeconds(10), () -> serverConns("MYDB3") == 0),
                "closed when returned: " + serverConns("MYDB3"));
    }

    @Test
    void aNodeRemovedWhileUpHasItsConnectionInUseAbortedAsTheCoreSays() throws Exception {
        AffinityDataSource ds = fcfDataSource("removal-up", c -> {
            if (c.getPoolName().endsWith("MYDB3")) {
                c.setMinimumIdle(2);
            }
        });
        Cluster cluster = ds.getCluster();
        ShardingKey key3 = keyOn(ds, "MYDB3");
        assertTrue(await(Duration.ofSeconds(15), () -> serverConns("MYDB3") >= 2));
        Connection held = ds.createConnectionBuilder().shardingKey(key3).build();
        try {
            held.setAutoCommit(false);
            assertEquals(portOf("MYDB3"), serverPort(held));
            int id3 = cluster.removeNode("MYDB3");
            assertEquals(NodeState.DOWN, cluster.nodeState(id3));
            assertFalse(cluster.nodeDownIsPlanned(id3), "the core: removed while taking work is not planned");
            assertTrue(await(Duration.ofSeconds(10), () -> aborted(held)),
                    "the connection in use on a node removed while Up is aborted");
            for (int i = 0; i < 20; i++) {
                try (Connection c = ds.createConnectionBuilder().shardingKey(key3).build()) {
                    assertNotEquals(portOf("MYDB3"), serverPort(c), "new borrows go elsewhere");
                }
            }
            assertTrue(await(Duration.ofSeconds(10), () -> serverConns("MYDB3") == 0),
                    "idle ones closed: " + serverConns("MYDB3"));
        } finally {
            held.close();
        }
    }
}
