package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The seed 002 (UCP) calls of {@link Cluster} across JNI (jni/ucp.rs), without a database. */
class UcpClusterTest {
    @Test
    void theWholePartitionMapIsReplacedOrNothingChanges() {
        try (Cluster c = Cluster.fromConfig("nodes = A, B, C\ndata.partitions = 4")) {
            assertEquals(1, c.replacePartitionMap(Map.of(0, "A", 1, "B", 2, "C", 3, "A"), "loader:test"));
            assertEquals("B", c.nodeName(c.partitionOwner(1)));
            Map<Integer, String> bad = new LinkedHashMap<>(Map.of(0, "A"));
            bad.put(1, "NOPE");
            assertThrows(UnknownNodeException.class, () -> c.replacePartitionMap(bad, "loader:test"));
            assertThrows(InvalidArgumentException.class, () -> c.replacePartitionMap(Map.of(-1, "A"), "x"));
            assertThrows(InvalidArgumentException.class, () -> c.replacePartitionMap(Map.of(9, "A"), "x"));
            assertThrows(InvalidArgumentException.class, () -> c.replacePartitionMap(Map.of(0, "A"), "bad source!"));
            assertEquals("B", c.nodeName(c.partitionOwner(1)));
            assertTrue(c.metricsJson().contains("\"partition_map\":{\"epoch\":1,\"source\":\"loader:test\""),
                    c.metricsJson());
            // A loader's failure keeps the map and is counted, its message escaped.
            c.partitionMapLoadFailed("loader:test", "relation \"pm\" does not exist");
            assertThrows(InvalidArgumentException.class, () -> c.partitionMapLoadFailed("bad source!", "x"));
            assertThrows(InvalidArgumentException.class, () -> c.partitionMapLoadFailed("loader:test", "\uD800"));
            assertEquals("B", c.nodeName(c.partitionOwner(1)));
            assertTrue(c.metricsJson().contains(
                    "\"load_failures\":1,\"last_error\":\"loader:test: relation \\\"pm\\\" does not exist\""),
                    c.metricsJson());
        }
    }

    @Test
    void aContextFollowsItsScopesStrictSwitch() {
        try (Cluster c = Cluster.fromConfig("nodes = A, B\ntransaction.strict = true\npolicy = round_robin")) {
            AffinityContext tx = c.newAffinityContext(Scope.TRANSACTION);
            Route placed = tx.pin();
            assertEquals(RouteKind.PLACED, placed.kind());
            assertEquals(placed.node(), tx.pinnedNode().getAsInt());
            Lease l = tx.pick();
            assertEquals(placed.node(), l.node());
            l.release(Outcome.OK);
            c.setNodeState(placed.nodeName(), NodeState.DOWN);
            assertThrows(StrictAffinityException.class, tx::pick);
            AffinityContext web = c.newAffinityContext(Scope.SESSION);
            assertNotEquals(placed.node(), web.pin().node());
            tx.close();
            assertTrue(tx.pinnedNode().isEmpty());
            assertThrows(InvalidArgumentException.class, () -> c.newAffinityContext(Scope.DATA).pin());
        }
    }
}
