package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Cluster;
import io.racaffinity.jmx.ClusterMonitor;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.lang.management.ManagementFactory;
import java.util.List;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * A cluster the application shares between data sources (an AffinityDataSource and an
 * AffinityXADataSource of one database, or two pools of one application) has one MXBean: it stays
 * registered while any of them is open, and goes with the last.
 */
@ExtendWith(PgNodes.class)
class SharedClusterMBeanTest {
    private static final MBeanServer MBS = ManagementFactory.getPlatformMBeanServer();

    private static AffinityDataSource over(Pools pools, Cluster cluster) {
        AffinityDataSource ds = pools.own(new AffinityDataSource());
        ds.setCluster(cluster);
        ds.setNodeDataSources(pools.asMap());
        ds.setHeartbeatIntervalMillis(0);
        return ds;
    }

    @Test
    void aSharedClustersMBeanStaysWhileOneOfItsDataSourcesIsOpen() throws Exception {
        try (Pools pools = new Pools(List.of("A"));
                Cluster cluster = Cluster.fromConfig("name = sharedmbean; nodes = A")) {
            ObjectName on = ClusterMonitor.objectName("sharedmbean");
            AffinityDataSource first = over(pools, cluster);
            AffinityDataSource second = over(pools, cluster);
            first.init();
            second.init();
            assertTrue(MBS.isRegistered(on));
            first.close();
            assertTrue(MBS.isRegistered(on), "the cluster left JMX while a data source still uses it");
            assertEquals("sharedmbean", MBS.getAttribute(on, "Name"), "it still shows the cluster");
            second.close();
            assertFalse(MBS.isRegistered(on), "gone with the last data source");
        }
    }
}
