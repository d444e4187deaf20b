package io.racaffinity.jdbc;

import static io.racaffinity.test.Pools.serverPort;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.Lease;
import io.racaffinity.NodeMetrics;
import io.racaffinity.Pin;
import io.racaffinity.RouteKind;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.testsupport.Await;
import java.lang.management.ManagementFactory;
import java.lang.ref.WeakReference;
import java.sql.Connection;
import java.sql.JDBCType;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.openmbean.CompositeData;
import javax.management.openmbean.TabularData;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * What an {@link AffinityConnection} the application never closes leaves behind, as
 * docs/java-datasource.md ("Connections never closed") states it: on a pinned thread its
 * lease is a host lease, which no garbage collection releases, so it stays in flight on its
 * node (metrics, JMX, {@code least_outstanding}) until the cluster closes; a connection routed
 * through the library (here by a sharding key) has its lease released {@code NEUTRAL} once
 * collected. Neither returns the node pool's physical connection: HikariCP keeps it checked
 * out.
 */
@ExtendWith(PgNodes.class)
class UnclosedConnectionTest {
    private static final List<String> NAMES = List.of("MYDB1", "MYDB2", "MYDB3");
    private static final MBeanServer MBS = ManagementFactory.getPlatformMBeanServer();

    @AutoClose
    private final Pools pools = new Pools(NAMES);

    private static long inFlight(Cluster c, int node) {
        return c.nodeMetrics().stream().filter(m -> m.node() == node).mapToLong(NodeMetrics::inFlight).sum();
    }

    private static long jmxInFlight(ObjectName on, String node) throws Exception {
        for (Object row : ((TabularData) MBS.getAttribute(on, "NodeInFlight")).values()) {
            CompositeData d = (CompositeData) row;
            if (node.equals(d.get("key"))) {
                return (Long) d.get("value");
            }
        }
        throw new AssertionError("no NodeInFlight row for " + node);
    }

    private int activeInPool(String node) {
        return pools.get(node).getHikariPoolMXBean().getActiveConnections();
    }

    /**
     * On a new thread: pins, takes a connection, uses it and ends without closing it (a request
     * thread that forgot its connection). Returns the connection, weakly.
     */
    @SuppressWarnings("try") // the pin is opened only for its effect on getConnection()
    private static WeakReference<Connection> forgetOnAPinnedThread(AffinityDataSource ds, AtomicReference<String> node)
            throws Exception {
        AtomicReference<WeakReference<Connection>> ref = new AtomicReference<>();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try (Pin pin = ds.pin()) {
                Connection c = ds.getConnection();
                AffinityConnection ac = c.unwrap(AffinityConnection.class);
                assertEquals(RouteKind.AFFINITY, ac.routeKind());
                serverPort(c); // used, never closed
                node.set(ac.nodeName());
                ref.set(new WeakReference<>(c));
            } catch (Throwable e) {
                failure.set(e);
            }
        });
        t.start();
        t.join();
        if (failure.get() != null) {
            throw new AssertionError(failure.get());
        }
        return ref.get();
    }

    /** A connection by sharding key (a lease the library counts), used and not closed. */
    private static WeakReference<Connection> forgetByKey(AffinityDataSource ds, long key) throws SQLException {
        Connection c = ds.createConnectionBuilder()
                .shardingKey(ds.createShardingKeyBuilder().subkey(key, JDBCType.BIGINT).build()).build();
        serverPort(c);
        return new WeakReference<>(c);
    }

    private static void collect(WeakReference<?>... refs) throws InterruptedException {
        assertTrue(Await.until(Duration.ofSeconds(20), Duration.ofMillis(20), () -> {
            System.gc();
            for (WeakReference<?> r : refs) {
                if (r.get() != null) {
                    return false;
                }
            }
            return true;
        }), "the forgotten connections were not collected");
    }

    @Test
    void aForgottenPinnedConnectionStaysInFlightUntilItsClusterClosesNotJustItsDataSource() throws Exception {
        Cluster cluster = Cluster.fromConfig("name = forgotten\nnodes = MYDB1, MYDB2, MYDB3\n"
                + "policy = least_outstanding");
        AffinityDataSource ds = pools.own(new AffinityDataSource());
        ds.setCluster(cluster); // shared: the data source's close leaves it open
        ds.setNodeDataSources(pools.asMap());
        ds.setHeartbeatIntervalMillis(0);
        ds.init();
        ObjectName on = ds.getObjectName();

        AtomicReference<String> pinnedName = new AtomicReference<>();
        WeakReference<Connection> pinned = forgetOnAPinnedThread(ds, pinnedName);
        int p = cluster.nodeId(pinnedName.get());
        long key = 0;
        while (cluster.routeKey(key).node() == p) {
            key++;
        }
        int k = cluster.routeKey(key).node();
        WeakReference<Connection> keyed = forgetByKey(ds, key);
        assertEquals(1, inFlight(cluster, p));
        assertEquals(1, inFlight(cluster, k));

        collect(pinned, keyed);
        // The library's lease is released NEUTRAL by the cleaner thread once collected...
        assertTrue(Await.until(Duration.ofSeconds(10), Duration.ofMillis(10), () -> inFlight(cluster, k) == 0),
                "the collected keyed connection's lease was not released");
        // ...the pinned thread's host lease is not: it counts as in flight on its node.
        assertEquals(1, inFlight(cluster, p), "a forgotten host lease stays in flight");
        assertEquals(1, jmxInFlight(on, pinnedName.get()));
        assertEquals(0, jmxInFlight(on, cluster.nodeName(k)));
        String prometheus = cluster.metricsPrometheus();
        assertTrue(prometheus.contains("racaffinity_node_in_flight{cluster=\"forgotten\",node=\""
                + pinnedName.get() + "\"} 1\n"), prometheus);
        // Neither returned its physical connection to the node's HikariCP pool.
        assertEquals(1, activeInPool(pinnedName.get()));
        assertEquals(1, activeInPool(cluster.nodeName(k)));

        // least_outstanding sends unpinned work to the idle nodes while the leak lasts.
        for (int i = 0; i < 30; i++) {
            try (Lease l = cluster.pick()) {
                assertNotEquals(p, l.node(), "least_outstanding avoids the node holding the forgotten lease");
            }
        }

        ds.close();
        assertFalse(cluster.isClosed());
        assertEquals(1, inFlight(cluster, p), "closing the data source ends no lease of a shared cluster");
        cluster.close();
        assertThrows(ClusterClosedException.class, cluster::nodeMetrics, "the lease went with its cluster");
    }

    @Test
    void aDataSourceThatBuiltItsClusterEndsTheForgottenLeaseOnClose() throws Exception {
        AffinityDataSource ds = pools.affinity("name = forgotten-own; nodes = MYDB1, MYDB2, MYDB3");
        Cluster cluster = ds.getCluster();
        AtomicReference<String> pinnedName = new AtomicReference<>();
        WeakReference<Connection> pinned = forgetOnAPinnedThread(ds, pinnedName);
        collect(pinned);
        assertEquals(1, inFlight(cluster, cluster.nodeId(pinnedName.get())));
        ds.close();
        assertTrue(cluster.isClosed(), "the data source closes the cluster it built");
        assertThrows(ClusterClosedException.class, cluster::nodeMetrics);
        // close() aborts what is still in use, a forgotten connection too, and drops it from its pool.
        assertEquals(0, activeInPool(pinnedName.get()), "the node pool still holds the physical connection");
    }
}
