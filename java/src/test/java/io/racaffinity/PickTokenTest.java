package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.junit.jupiter.api.Test;

/**
 * {@link Cluster#pickToken()}, the lease of {@link Cluster#pick()} kept as a token by a binding's
 * own object (AffinityDataSource's connection), must keep every guarantee of the {@link Lease} it
 * replaces: the host lease counted on the page (balancing sees it), an OK ended on the page, a
 * FAILED and any end after the epoch moved seen by the core, and a library lease (a node not
 * {@code Up}) watched by the garbage collector through {@link Cluster#adoptToken}.
 */
class PickTokenTest {
    private static final VarHandle PAGE = MethodHandles.byteBufferViewVarHandle(long[].class,
            ByteOrder.nativeOrder());

    private static NodeMetrics metrics(Cluster c, int node) {
        return c.nodeMetrics().stream().filter(m -> m.node() == node).findFirst().orElseThrow();
    }

    private static long hostLeasesInFlight(Cluster c, int node) throws ReflectiveOperationException {
        Field f = Cluster.class.getDeclaredField("page");
        f.setAccessible(true);
        ByteBuffer page = (ByteBuffer) f.get(c);
        long n = 0;
        for (int stripe = 0; stripe < ThreadContexts.HOST_LEASE_STRIPES; stripe++) {
            int word = ThreadContexts.HOST_LEASE_OFFSET + (stripe * ThreadContexts.HOST_LEASE_NODES + node) * 8;
            n += (long) PAGE.getVolatile(page, word) & ((1L << 24) - 1);
        }
        return n;
    }

    /** An unpinned (balanced) host token on {@code node}; picks landing elsewhere are released. */
    private static long balancedTokenOn(Cluster c, int node) {
        for (int i = 0; i < 1000; i++) {
            long t = c.pickToken();
            assertTrue(t >= 0, "an Up node's pick is a host lease");
            assertEquals(RouteKind.BALANCED, Cluster.tokenKind(t));
            if (Cluster.tokenNode(t) == node) {
                return t;
            }
            c.releaseToken(t, Outcome.NEUTRAL);
        }
        throw new AssertionError("no balanced pick on node " + node + " in 1,000");
    }

    @Test
    void anUnpinnedTokenIsAHostLeaseThatBalancingSeesAndAnOkEndsOnThePage() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = token\nnodes = a, b\npolicy = least_outstanding")) {
            long first = c.pickToken();
            assertTrue(first >= 0);
            int a = Cluster.tokenNode(first);
            assertEquals(1, hostLeasesInFlight(c, a));
            assertEquals(1, metrics(c, a).inFlight());
            for (int i = 0; i < 20; i++) {
                long other = c.pickToken();
                assertNotEquals(a, Cluster.tokenNode(other), "least_outstanding must count the token's lease on a");
                c.releaseToken(other, Outcome.NEUTRAL);
            }
            c.releaseToken(first, Outcome.OK);
            assertEquals(0, hostLeasesInFlight(c, a));
            NodeMetrics m = metrics(c, a);
            assertEquals(0, m.inFlight());
            assertEquals(1, m.successes(), "the OK ended on the page is collected as a success");
        }
    }

    @Test
    void aPinnedThreadsTokenIsItsCachedRouteAsAHostLease() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = token-pinned\nnodes = a, b, c");
                Pin pin = c.pin()) {
            int pinned = c.pinnedNode().orElseThrow();
            for (int i = 0; i < 3; i++) { // the first crosses, the others are the cache's
                long t = c.pickToken();
                assertTrue(t >= 0);
                assertEquals(pinned, Cluster.tokenNode(t));
                assertEquals(RouteKind.AFFINITY, Cluster.tokenKind(t));
                assertEquals(1, hostLeasesInFlight(c, pinned));
                c.releaseToken(t, Outcome.OK);
                assertEquals(0, hostLeasesInFlight(c, pinned));
            }
            assertEquals(3, metrics(c, pinned).successes());
        }
    }

    @Test
    void failedTokenReleasesReachTheCoreAndEjectTheNode() {
        try (Cluster c = Cluster.fromConfig("name = token-failed\nnodes = a, b\nhealth.eject_after_failures = 2")) {
            int a = c.nodeIds()[0];
            c.releaseToken(balancedTokenOn(c, a), Outcome.FAILED);
            assertEquals(NodeState.UP, c.nodeState(a));
            c.releaseToken(balancedTokenOn(c, a), Outcome.FAILED);
            NodeMetrics m = metrics(c, a);
            assertEquals(NodeState.DOWN, m.state(), "two FAILED releases eject the node");
            assertEquals(2, m.failures());
            assertEquals(0, m.inFlight());
        }
    }

    /** As UnpinnedHostLeaseTest's: a token held across an ejection must end in the core (its epoch check). */
    @Test
    void aTokenHeldAcrossAnEjectionEndsInTheCoreSoTheTrialCounts() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = token-stale\nnodes = a, b\nhealth.eject_after_failures = 1\n"
                + "health.eject_backoff = 100ms")) {
            int a = c.nodeIds()[0];
            long stale = balancedTokenOn(c, a);
            c.reportOutcome(a, false);
            assertEquals(NodeState.DOWN, c.nodeState(a));
            c.releaseToken(stale, Outcome.NEUTRAL);
            assertEquals(0, hostLeasesInFlight(c, a));

            long trial = 0;
            boolean found = false;
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (!found && System.nanoTime() < deadline) {
                long t = c.pickToken();
                if (Cluster.tokenNode(t) == a) {
                    trial = t;
                    found = true;
                } else {
                    c.releaseToken(t, Outcome.NEUTRAL);
                    Thread.sleep(5);
                }
            }
            assertTrue(found, "no trial on a within 10 s of a 100 ms back-off");
            assertTrue(trial < 0, "the half-open trial is the library's lease: a library token");
            assertEquals(0, hostLeasesInFlight(c, a));
            Lease l = c.adoptToken(trial);
            assertEquals(a, l.node());
            assertThrows(InvalidLeaseException.class, () -> c.releaseToken(l.node() | Long.MIN_VALUE, Outcome.OK),
                    "a library token is released through its Lease");
            l.release(Outcome.OK);
            assertEquals(NodeState.UP, c.nodeState(a), "the trial's success lifts the ejection");
            assertEquals(0, metrics(c, a).inFlight());
        }
    }

    @Test
    void aHostTokenHasNoLibraryLeaseToAdopt() {
        try (Cluster c = Cluster.fromConfig("name = token-adopt\nnodes = a")) {
            long t = c.pickToken();
            assertThrows(InvalidLeaseException.class, () -> c.adoptToken(t));
            c.releaseToken(t, Outcome.OK);
        }
    }
}
