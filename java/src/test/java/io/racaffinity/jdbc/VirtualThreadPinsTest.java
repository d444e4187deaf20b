package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import io.racaffinity.test.VirtualThreads;
import java.util.Set;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Pins held by virtual threads, which share a few carrier OS threads: a pin
 * kept in an OS thread-local would leak between them. Runs on JDK 21+ (the
 * build runs it on Temurin 25 through the {@code virtual-threads} profile);
 * with {@code -Dracaffinity.requireVirtualThreads=true} an older JDK fails
 * instead of skipping. Compiled for Java 17, so virtual threads are made
 * through reflection.
 */
@Tag("virtual-threads")
@ExtendWith(PgNodes.class)
class VirtualThreadPinsTest {

    @Test
    void virtualThreadsSharingCarriersNeverSeeEachOthersPins() throws Exception {
        VirtualThreads.assumeAvailable();
        try (Pools pools = new Pools(AffinityDataSourceTest.NAMES, c -> c.setMaximumPoolSize(20));
                AffinityDataSource ds = pools.affinity(
                        "name = virtual-threads; nodes = MYDB1, MYDB2, MYDB3; policy = random")) {
            PinIsolation run = new PinIsolation();
            run.run(ds, 1000, 3, VirtualThreads::start);
            // The point of the test: carriers ran virtual threads pinned to different
            // nodes, so OS-thread pins would have been wrong here.
            boolean shared = run.nodesPerCarrier.values().stream().anyMatch((Set<String> s) -> s.size() >= 2);
            assertTrue(shared, "some carrier OS thread ran virtual threads pinned to different nodes: "
                    + run.nodesPerCarrier);
            assertTrue(run.nodesPerCarrier.size() < 1000, "virtual threads shared carriers");
            System.err.println("virtual threads: " + run.connections + " connections on " + run.nodesPerCarrier.size()
                    + " carriers; pins " + run.pinnedNodes + "; JDK " + Runtime.version());
        }
    }
}
