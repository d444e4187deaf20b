package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
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

    /** Live affinities of the session scope: a web-session callback context's pin counts there. */
    private static long liveSessions(Cluster c) {
        Matcher m = Pattern.compile("\"session\":\\{[^}]*\"live\":(\\d+)").matcher(c.metricsJson());
        return m.find() ? Long.parseLong(m.group(1)) : -1;
    }

    @Test
    void aCallbackThatDeclinesItsContextKeepsNoAffinity() throws Exception {
        // UCP: setConnectionAffinityContext answers false when the callback does not store the context, so no
        // affinity was established. The connection is served; the pin must not stay in the core until the
        // garbage collector finds the context (a live session affinity nobody can route by).
        AffinityDataSource ds = pools.affinity("name = cbdeclines; nodes = MYDB1, MYDB2, MYDB3");
        Cluster cluster = ds.getCluster();
        WebSessionCallback cb = new WebSessionCallback();
        cb.declines = true;
        ds.registerConnectionAffinityCallback(cb);
        for (int i = 0; i < 3; i++) {
            try (Connection c = ds.getConnection()) {
                assertEquals(1, c.createStatement().executeQuery("SELECT 1").next() ? 1 : 0);
            }
        }
        assertEquals(null, cb.context, "the callback kept nothing");
        assertEquals(0, liveSessions(cluster), "declined contexts still pinned in the core");
        assertEquals(0, inFlight(cluster));
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
