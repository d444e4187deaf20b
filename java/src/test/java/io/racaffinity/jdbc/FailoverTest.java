package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.AffinityDataSourceTest.keyOn;
import static io.racaffinity.jdbc.AffinityDataSourceTest.portOf;
import static io.racaffinity.test.Pools.serverPort;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.Pin;
import io.racaffinity.RouteKind;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.sql.ShardingKey;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** A real crash of node 2 (SIGKILL of its postmaster), detected three ways. Node 2 is restarted at the end. */
@ExtendWith(PgNodes.class)
class FailoverTest {
    private static final String EVENT_LINE = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=MYDB2 host=h2"
            + " status=%s card=1 timestamp=2026-11-29 08:%02d:%02d";
    /** Each event a second after the last one: the core keeps the newest timestamp (semantics.md, Agreement). */
    private static final java.util.concurrent.atomic.AtomicInteger SECOND = new java.util.concurrent.atomic.AtomicInteger();

    private static String event(String status) {
        int s = SECOND.incrementAndGet();
        return String.format(EVENT_LINE, status, s / 60, s % 60);
    }

    private static AffinityDataSource ds(Pools pools, String name, String extra) {
        AffinityDataSource ds = new AffinityDataSource();
        ds.setConfig("name = " + name + "; nodes = MYDB1, MYDB2, MYDB3; policy = random; " + extra);
        ds.setNodeDataSources(pools.asMap());
        return ds;
    }

    private static NodeMetrics metrics(Cluster c, String node) {
        return c.nodeMetrics().stream().filter(m -> m.name().equals(node)).findFirst().orElseThrow();
    }

    /** 200 connections, pinned and not, and node 2's data keys: none may land on node 2. */
    private static void noConnectionGoesToNode2(AffinityDataSource ds, ShardingKey key2) throws SQLException {
        int port2 = portOf("MYDB2");
        for (int i = 0; i < 200; i++) {
            try (Connection c = ds.getConnection()) {
                assertNotEquals(port2, serverPort(c), "connection " + i + " went to the dead node");
            }
        }
        for (int i = 0; i < 20; i++) {
            try (Pin pin = ds.pin(); Connection c = ds.getConnection()) {
                assertNotEquals("MYDB2", pin.nodeName());
                assertNotEquals(port2, serverPort(c));
            }
        }
        try (Connection c = ds.createConnectionBuilder().shardingKey(key2).build()) {
            assertEquals(RouteKind.FALLBACK, c.unwrap(AffinityConnection.class).routeKind());
            assertNotEquals(port2, serverPort(c));
        }
    }

    @Test
    void afterAKilledNodesFailureIsReportedNoConnectionGoesToIt() throws Exception {
        try (Pools pools = new Pools(AffinityDataSourceTest.NAMES, c -> c.setConnectionTimeout(1000));
                AffinityDataSource ds = ds(pools, "passive",
                        "health.eject_after_failures = 1; health.eject_backoff = 10m; health.eject_backoff_max = 1h")) {
            ds.setHeartbeatIntervalMillis(0);
            Cluster cluster = ds.getCluster();
            ShardingKey key2 = keyOn(ds, "MYDB2");
            try (Connection c = ds.createConnectionBuilder().shardingKey(key2).build()) {
                assertEquals(portOf("MYDB2"), serverPort(c));
            }
            PgNodes.kill(2);
            try {
                // The application's next connections to MYDB2 fail: 08006 (I/O error) or 08001 (refused)
                // are node failures and eject it at once; 57P01 (a backend's "terminating connection due to
                // unexpected postmaster exit") is also what one pg_terminate_backend sends, so it counts
                // nothing, and the pool's next (refused) connection reports the crash. A connection the
                // pool could not give is retried on the next node within the call (SoftFailoverTest):
                // then the request succeeds, off MYDB2.
                List<String> states = new ArrayList<>();
                for (int attempt = 0; attempt < 4 && cluster.nodeState("MYDB2") != NodeState.DOWN; attempt++) {
                    try (Connection c = ds.createConnectionBuilder().shardingKey(key2).build()) {
                        assertNotEquals(portOf("MYDB2"), serverPort(c), "a retried request left the dead node");
                        states.add("retried");
                    } catch (SQLException e) {
                        states.add(e.getSQLState());
                        assertTrue(e.getSQLState() != null && (e.getSQLState().startsWith("08")
                                || e.getSQLState().equals("57P01")), String.valueOf(e));
                    }
                }
                assertEquals(NodeState.DOWN, cluster.nodeState("MYDB2"), "SQLStates seen: " + states);
                assertEquals("ejected", metrics(cluster, "MYDB2").downCause());
                noConnectionGoesToNode2(ds, key2);
            } finally {
                PgNodes.restart(2);
            }
            // A FAN "up" lifts the ejection, and node 2's keys go home.
            cluster.applyEvent(event("up"));
            assertEquals(NodeState.UP, cluster.nodeState("MYDB2"));
            // (node 2's pool may still be backing off from the refused connections: poll with a deadline)
            int[] port = {-1};
            // (a timed-out attempt counts as a failure and ejects it again: lift that with the next FAN up)
            assertTrue(Pools.await(Duration.ofSeconds(20), () -> {
                if (cluster.nodeState("MYDB2") != NodeState.UP) {
                    cluster.applyEvent(event("up"));
                }
                try (Connection c = ds.createConnectionBuilder().shardingKey(key2).build()) {
                    port[0] = serverPort(c);
                    return port[0] == portOf("MYDB2");
                } catch (SQLException e) {
                    return false;
                }
            }), "node 2's keys go home: last port " + port[0]);
        }
    }

    @Test
    void aFanDownEventForAKilledNodeKeepsConnectionsAway() throws Exception {
        try (Pools pools = new Pools(AffinityDataSourceTest.NAMES, c -> c.setConnectionTimeout(1000));
                AffinityDataSource ds = ds(pools, "fan", "database = orcl; service = svc")) {
            ds.setHeartbeatIntervalMillis(0);
            Cluster cluster = ds.getCluster();
            ShardingKey key2 = keyOn(ds, "MYDB2");
            PgNodes.kill(2);
            try {
                assertEquals(1, cluster.applyEvent(event("down reason=FAILURE")));
                noConnectionGoesToNode2(ds, key2);
                assertEquals(0, metrics(cluster, "MYDB2").failures(), "no application traffic hit the dead node");
            } finally {
                PgNodes.restart(2);
            }
        }
    }

    @Test
    void theHeartbeatMarksAKilledNodeDownWithoutApplicationTraffic() throws Exception {
        try (Pools pools = new Pools(AffinityDataSourceTest.NAMES, c -> {
                    c.setConnectionTimeout(250);
                    c.setValidationTimeout(250);
                });
                AffinityDataSource ds = ds(pools, "heartbeat", "heartbeat.interval = 100ms; heartbeat.misses = 3")) {
            ds.setHeartbeatTimeoutSeconds(1);
            Cluster cluster = ds.getCluster(); // starts the heartbeat at the config's interval
            assertTrue(Pools.await(Duration.ofSeconds(10), () -> pools.get("MYDB2").getHikariPoolMXBean() != null
                    && metrics(cluster, "MYDB2").probeMisses() == 0 && cluster.nodeState("MYDB2") == NodeState.UP));
            PgNodes.kill(2);
            try {
                assertTrue(Pools.await(Duration.ofSeconds(30), () -> cluster.nodeState("MYDB2") == NodeState.DOWN),
                        "node 2 went down by heartbeat: " + cluster.nodeMetrics());
                NodeMetrics m = metrics(cluster, "MYDB2");
                assertEquals("heartbeat", m.downCause());
                assertTrue(m.probeMisses() >= 3, m.toString());
                assertEquals(0, m.picks(), "no application traffic was involved");
                assertEquals(NodeState.UP, cluster.nodeState("MYDB1"));
                assertEquals(NodeState.UP, cluster.nodeState("MYDB3"));
            } finally {
                PgNodes.restart(2);
            }
            assertTrue(Pools.await(Duration.ofSeconds(30), () -> cluster.nodeState("MYDB2") == NodeState.UP),
                    "a successful probe brings node 2 back: " + cluster.nodeMetrics());
        }
    }
}
