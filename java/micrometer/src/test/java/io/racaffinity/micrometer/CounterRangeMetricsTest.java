package io.racaffinity.micrometer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import java.lang.reflect.Method;
import org.junit.jupiter.api.Test;

/**
 * The core's counters are u64, and a host adds any count in one call (count_host_hits, which
 * Java reaches through Native from its route caches): a scope counter past Long.MAX_VALUE is
 * still read, as the double every meter is, and does not fail the whole scrape.
 */
class CounterRangeMetricsTest {
    private static void countHostHits(Cluster c, int node, long n) throws Exception {
        Method handle = Cluster.class.getDeclaredMethod("handle");
        handle.setAccessible(true);
        Class<?> nat = Class.forName("io.racaffinity.Native");
        Method count = nat.getDeclaredMethod("countHostHits", long.class, int.class, long.class);
        count.setAccessible(true);
        count.invoke(null, (long) handle.invoke(c), node, n);
    }

    @Test
    void aScopeCounterPastLongMaxIsReadAndTheNodesStillAre() throws Exception {
        try (Cluster c = Cluster.builder().name("counter-range-meters").nodes("A", "B").build()) {
            countHostHits(c, 0, Long.MAX_VALUE);
            countHostHits(c, 0, 1);
            Snapshot s = new Snapshot(c);
            assertEquals(0x1p63, s.scope("thread", "hits"));
            assertEquals(0.0, s.scope("session", "hits"));
            assertEquals((double) Long.MAX_VALUE, s.node("A", NodeMetrics::affinityHits));
        }
    }
}
