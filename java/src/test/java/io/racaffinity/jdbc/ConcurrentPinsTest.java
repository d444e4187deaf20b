package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

@ExtendWith(PgNodes.class)
class ConcurrentPinsTest {
    @Test
    void twoHundredConcurrentThreadsNeverSeeEachOthersPins() throws Exception {
        try (Pools pools = new Pools(AffinityDataSourceTest.NAMES, c -> c.setMaximumPoolSize(20));
                AffinityDataSource ds = pools.affinity(
                        "name = platform-threads; nodes = MYDB1, MYDB2, MYDB3; policy = random")) {
            PinIsolation run = new PinIsolation();
            run.run(ds, 200, 5, r -> {
                Thread t = new Thread(r);
                t.start();
                return t;
            });
            Cluster c = ds.getCluster();
            List<NodeMetrics> m = c.nodeMetrics();
            assertEquals(0, m.stream().mapToLong(NodeMetrics::inFlight).sum(), "every lease released");
            assertEquals(1000, m.stream().mapToLong(NodeMetrics::successes).sum());
        }
    }
}
