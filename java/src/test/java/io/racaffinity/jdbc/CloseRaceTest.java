package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariPoolMXBean;
import io.racaffinity.Cluster;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * {@code close()} of an {@link AffinityDataSource} while a {@code getConnection()} waits on a node
 * pool: once close() returned, the data source hands out nothing, as a closed HikariCP pool does,
 * even when the cluster and the node pools are the application's (shared, so not closed with it).
 */
@ExtendWith(PgNodes.class)
class CloseRaceTest {

    @Test
    void aBorrowWaitingOnItsPoolWhenTheDataSourceClosesGetsNoConnection() throws Exception {
        try (Pools pools = new Pools(List.of("A"));
                Cluster cluster = Cluster.fromConfig("name = closerace; nodes = A")) {
            CountDownLatch waiting = new CountDownLatch(1);
            CountDownLatch closed = new CountDownLatch(1);
            DataSource pool = pools.get("A");
            // The node pool of a borrow that is still waiting when the application closes the data source.
            DataSource slow = (DataSource) Proxy.newProxyInstance(getClass().getClassLoader(),
                    new Class<?>[] {DataSource.class}, (p, m, args) -> {
                        if (m.getName().equals("getConnection")) {
                            waiting.countDown();
                            assertTrue(closed.await(30, TimeUnit.SECONDS));
                        }
                        try {
                            return m.invoke(pool, args);
                        } catch (InvocationTargetException e) {
                            throw e.getCause();
                        }
                    });
            AffinityDataSource ds = pools.own(new AffinityDataSource());
            ds.setCluster(cluster);
            ds.setNodeDataSources(Map.of("A", slow));
            ds.setHeartbeatIntervalMillis(0);
            ds.setRegisterMBean(false);
            ds.init();
            CompletableFuture<Object> borrow = CompletableFuture.supplyAsync(() -> {
                try {
                    return ds.getConnection();
                } catch (SQLException e) {
                    return e;
                }
            });
            assertTrue(waiting.await(30, TimeUnit.SECONDS));
            ds.close();
            closed.countDown();
            Object got = borrow.get(30, TimeUnit.SECONDS);
            if (got instanceof Connection) {
                ((Connection) got).close();
            }
            assertTrue(got instanceof SQLException && "08003".equals(((SQLException) got).getSQLState()),
                    "a closed data source handed out " + got);
            HikariPoolMXBean mx = pools.get("A").getHikariPoolMXBean();
            assertTrue(Pools.await(Duration.ofSeconds(5), () -> mx.getActiveConnections() == 0),
                    "the pool's connection went back");
            assertEquals(0, cluster.nodeMetrics().get(0).inFlight(), "the lease was released");
        }
    }
}
