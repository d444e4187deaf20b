package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.racaffinity.jmx.ClusterMonitor;
import org.junit.jupiter.api.Test;

/**
 * The core's counters are u64 and a host adds any count in one call (count_host_hits): Java's
 * views of them reach Long.MAX_VALUE and stay there, never wrapping negative.
 */
class CounterRangeTest {
    @Test
    void countersPastLongMaxSaturateInNodeMetricsAndTheJmxTotal() {
        try (Cluster c = Cluster.builder().name("counter-range").nodes("A", "B").build()) {
            Native.countHostHits(c.handle(), 0, Long.MAX_VALUE);
            Native.countHostHits(c.handle(), 0, 1);
            Native.countHostHits(c.handle(), 1, Long.MAX_VALUE);
            for (NodeMetrics m : c.nodeMetrics()) {
                assertEquals(Long.MAX_VALUE, m.picks(), m.name());
            }
            assertEquals(Long.MAX_VALUE, new ClusterMonitor(c).getTotalPicks());
            // The JSON keeps the exact u64.
            String json = c.metricsJson();
            assertEquals(true, json.contains("\"picks\":9223372036854775808"), json);
        }
    }
}
