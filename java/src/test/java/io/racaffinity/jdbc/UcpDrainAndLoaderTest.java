package io.racaffinity.jdbc;

import static io.racaffinity.test.Pools.await;
import static io.racaffinity.test.Pools.serverPort;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.Pin;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.JDBCType;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.ShardingKey;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Seed 002 (UCP) parity over the 3 local PostgreSQL nodes: a planned drain
 * with a (short, real-time) timeout empties the node's HikariCP pool, and the
 * partition-map loader follows a map table changed by SQL while traffic runs.
 */
@ExtendWith(PgNodes.class)
class UcpDrainAndLoaderTest {
    static final List<String> NAMES = List.of("RAC1", "RAC2", "RAC3");
    static final String APP = "racaff-ucp-java";
    private Pools pools;

    @AfterEach
    void close() {
        if (pools != null) {
            pools.close();
        }
    }

    private AffinityDataSource ds(String name, String extra) {
        AffinityDataSource ds = pools.affinity("name = " + name
                + "; database = orcl; service = svc; nodes = RAC1, RAC2, RAC3; policy = random; " + extra);
        ds.setRegisterMBean(false);
        ds.setPoolMaintenanceMillis(50);
        return ds;
    }

    static int portOf(String node) {
        return PgNodes.port(NAMES.indexOf(node) + 1);
    }

    static int port(AffinityDataSource ds) throws SQLException {
        try (Connection c = ds.getConnection()) {
            return serverPort(c);
        }
    }

    /** Connections of this test's pools open on a node, as the server counts them. */
    static int serverConns(String node) {
        // This test's nodes are RAC1..3, not FcfPools' names: the node by its number.
        return FcfPools.serverConns(APP, NAMES.indexOf(node) + 1);
    }

    static String fan(String node, String tail) {
        return "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=" + node + " host=h " + tail;
    }

    @Test
    void aPlannedDrainEmptiesTheNodePoolByItsTimeout() throws Exception {
        pools = new Pools(NAMES, c -> {
            c.setMinimumIdle(2);
            c.addDataSourceProperty("ApplicationName", APP);
        });
        AffinityDataSource ds = ds("drain", "");
        Cluster cluster = ds.getCluster();
        assertTrue(await(Duration.ofSeconds(15), () -> NAMES.stream().allMatch(n -> serverConns(n) >= 2)));
        String node;
        try (Pin pin = ds.pin()) {
            node = pin.nodeName();
            Connection busy = ds.getConnection(); // in flight across the drain
            assertEquals(portOf(node), serverPort(busy));
            long t0 = System.nanoTime();
            ds.applyEvent(fan(node, "status=down reason=USER drain_timeout=2"));
            assertEquals(NodeState.DRAINING, cluster.nodeState(node));
            // Idle connections close at once; the busy one stays and works.
            assertTrue(await(Duration.ofSeconds(2), () -> serverConns(node) == 1), "idle: " + serverConns(node));
            assertTrue(System.nanoTime() - t0 < 2_000_000_000L);
            assertEquals(portOf(node), serverPort(busy));
            // The pin runs on during the drain; new work goes elsewhere.
            assertEquals(portOf(node), port(ds));
            List<Integer> fresh = CompletableFuture.supplyAsync(() -> {
                List<Integer> ports = new ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    try {
                        ports.add(port(ds));
                    } catch (SQLException e) {
                        throw new IllegalStateException(e);
                    }
                }
                return ports;
            }).get();
            assertFalse(fresh.contains(portOf(node)), fresh.toString());
            busy.close(); // retired as it is returned
            assertTrue(await(Duration.ofSeconds(2), () -> serverConns(node) == 0), "left: " + serverConns(node));
            // When the timeout ends the pin moves; the instance holds no pooled connection.
            assertTrue(await(Duration.ofSeconds(5), () -> {
                try {
                    return port(ds) != portOf(node);
                } catch (SQLException e) {
                    return false;
                }
            }));
            assertTrue(System.nanoTime() - t0 >= 2_000_000_000L, "the pin held until the drain timeout");
            assertTrue(await(Duration.ofSeconds(1), () -> serverConns(node) == 0), "left: " + serverConns(node));
        }
        ds.applyEvent(fan(node, "status=up"));
        assertEquals(NodeState.UP, cluster.nodeState(node));
        assertTrue(await(Duration.ofSeconds(5), () -> {
            try {
                return port(ds) == portOf(node);
            } catch (SQLException e) {
                return false;
            }
        }), "new work reaches the node again after status=up");
    }

    @Test
    void theLoaderFollowsAMapTableChangedBySqlWithNoRequestFailing() throws Exception {
        pools = new Pools(NAMES);
        int parts = 6;
        try (Connection admin = DriverManager.getConnection(PgNodes.url(1), "postgres", "");
                Statement s = admin.createStatement()) {
            s.execute("DROP TABLE IF EXISTS ucp_partition_map_java");
            s.execute("CREATE TABLE ucp_partition_map_java (part int PRIMARY KEY, node text NOT NULL)");
            s.execute("INSERT INTO ucp_partition_map_java SELECT p, 'RAC' || (p % 3 + 1) FROM generate_series(0, "
                    + (parts - 1) + ") p");
            AtomicBoolean broken = new AtomicBoolean();
            PartitionMapLoader loader = () -> {
                if (broken.get()) {
                    throw new SQLException("map table unreachable", "08006");
                }
                Map<Integer, String> map = new HashMap<>();
                try (Connection c = DriverManager.getConnection(PgNodes.url(1), "postgres", "");
                        Statement q = c.createStatement();
                        ResultSet rs = q.executeQuery("SELECT part, node FROM ucp_partition_map_java")) {
                    while (rs.next()) {
                        map.put(rs.getInt(1), rs.getString(2));
                    }
                }
                return map;
            };
            AffinityDataSource ds = ds("loader", "data.partitions = " + parts);
            ds.setPartitionMapLoader(loader);
            ds.setPartitionMapReloadMillis(100);
            Cluster cluster = ds.getCluster();
            assertTrue(cluster.metricsJson().contains("\"source\":\"loader\""), cluster.metricsJson());
            Map<Integer, String> table = new HashMap<>();
            java.util.function.BooleanSupplier allOnOwner = () -> {
                try {
                    table.clear();
                    try (ResultSet rs = s.executeQuery("SELECT part, node FROM ucp_partition_map_java")) {
                        while (rs.next()) {
                            table.put(rs.getInt(1), rs.getString(2));
                        }
                    }
                    for (long k = 0; k < 40; k++) {
                        if (keyPort(ds, k) != portOf(table.get(cluster.partitionOf(k)))) {
                            return false;
                        }
                    }
                    return true;
                } catch (SQLException e) {
                    throw new IllegalStateException(e);
                }
            };
            assertTrue(allOnOwner.getAsBoolean());
            List<Throwable> failures = new CopyOnWriteArrayList<>();
            AtomicLong served = new AtomicLong();
            AtomicBoolean stop = new AtomicBoolean();
            Thread traffic = new Thread(() -> {
                while (!stop.get()) {
                    for (long k = 0; k < 40; k++) {
                        try {
                            keyPort(ds, k);
                            served.incrementAndGet();
                        } catch (Throwable e) {
                            failures.add(e);
                        }
                    }
                }
            });
            traffic.start();
            try {
                s.execute("UPDATE ucp_partition_map_java SET node = 'RAC' || ((part + 1) % 3 + 1)");
                assertTrue(await(Duration.ofSeconds(5), allOnOwner), "every key on its new owner");
                // A failing loader keeps the last good map and is counted.
                long fails = ds.getPartitionMapLoadFailures();
                broken.set(true);
                assertTrue(await(Duration.ofSeconds(5), () -> ds.getPartitionMapLoadFailures() > fails));
                assertTrue(ds.getPartitionMapLoadError().contains("map table unreachable"));
                // The core's metrics (JSON, Prometheus, JMX) show it too.
                String json = ds.getCluster().metricsJson();
                assertFalse(json.contains("\"load_failures\":0,"), json);
                assertTrue(json.contains("map table unreachable"), json);
                assertTrue(allOnOwner.getAsBoolean());
                broken.set(false);
                assertTrue(await(Duration.ofSeconds(5), () -> ds.getPartitionMapLoadError() == null));
            } finally {
                stop.set(true);
                traffic.join();
            }
            assertEquals(List.of(), failures);
            assertTrue(served.get() > 0);
            s.execute("DROP TABLE ucp_partition_map_java");
        }
    }

    static int keyPort(AffinityDataSource ds, long k) throws SQLException {
        ShardingKey key = ds.createShardingKeyBuilder().subkey(k, JDBCType.BIGINT).build();
        try (Connection c = ds.createConnectionBuilder().shardingKey(key).build()) {
            return serverPort(c);
        }
    }
}
