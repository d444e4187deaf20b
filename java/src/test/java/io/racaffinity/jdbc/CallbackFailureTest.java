package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.util.List;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * UCP's connection affinity callback throwing from {@code setConnectionAffinityContext} (say it stores
 * the context in an HTTP session that was invalidated meanwhile: IllegalStateException): the error is
 * the application's and reaches it, and the lease the call had taken is released.
 */
@ExtendWith(PgNodes.class)
class CallbackFailureTest {
    @AutoClose
    private final Pools pools = new Pools(List.of("MYDB1", "MYDB2", "MYDB3"));

    private static long inFlight(Cluster c) {
        return c.nodeMetrics().stream().mapToLong(NodeMetrics::inFlight).sum();
    }

    @Test
    void aCallbackThatThrowsOnASoftMoveLeavesNoLeaseInFlight() throws Exception {
        AffinityDataSource ds = pools.affinity("name = cbthrows; nodes = MYDB1, MYDB2, MYDB3");
        Cluster cluster = ds.getCluster();
        WebSessionCallback cb = WebSessionCallback.registeredOn(ds);
        String node = cb.placedOn;
        assertEquals(0, inFlight(cluster));
        // The context's instance goes Down: the next request moves it, and the callback is told.
        cluster.setNodeState(node, NodeState.DOWN);
        cb.invalidated = true;
        IllegalStateException e = assertThrows(IllegalStateException.class, ds::getConnection);
        assertEquals("setAttribute: Session already invalidated", e.getMessage());
        assertEquals(0, inFlight(cluster), "the moved context's lease was left in flight");
    }
}
