package io.racaffinity;

import static io.racaffinity.HostLeases.inFlight;
import static io.racaffinity.HostLeases.metrics;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * An unpinned {@link Cluster#pick()} is one crossing: the library picks and
 * begins a host lease on the epoch page, and an {@code OK} or {@code NEUTRAL}
 * release under the same epoch ends it on the page with no call. Everything
 * else must still reach the core: a {@code FAILED} release (ejection counts
 * it), and any release after the epoch moved (a lease in flight at an
 * ejection is stale, and its end must be seen before the half-open trial is
 * judged). Each of those is checked here by what the core does with it.
 */
class UnpinnedHostLeaseTest {
    /** An unpinned (balanced) lease on {@code node}; picks landing elsewhere are released. */
    private static Lease balancedLeaseOn(Cluster c, int node) {
        for (int i = 0; i < 1000; i++) {
            Lease l = c.pick();
            assertEquals(RouteKind.BALANCED, l.kind());
            if (l.node() == node) {
                return l;
            }
            l.release(Outcome.NEUTRAL);
        }
        throw new AssertionError("no balanced pick on node " + node + " in 1,000");
    }

    @Test
    void anUnpinnedPickIsAHostLeaseThatBalancingSeesAndAnOkEndsOnThePage() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = unpinned\nnodes = a, b\npolicy = least_outstanding")) {
            Lease first = c.pick();
            assertEquals(RouteKind.BALANCED, first.kind());
            int a = first.node();
            assertEquals(1, inFlight(c, a), "begun by the library on this thread's stripe of the page");
            assertEquals(1, metrics(c, a).inFlight());
            for (int i = 0; i < 20; i++) {
                try (Lease other = c.pick()) {
                    assertNotEquals(a, other.node(), "least_outstanding must count the host lease in flight on a");
                }
            }
            first.release(Outcome.OK);
            assertEquals(0, inFlight(c, a));
            NodeMetrics m = metrics(c, a);
            assertEquals(0, m.inFlight());
            assertEquals(1, m.successes(), "the OK ended on the page is collected as a success");
        }
    }

    /**
     * The contract that replaces the garbage collector's release for an unpinned pick (a host
     * lease has no cleaner, as in a pin): dropped leases stay in flight, at most
     * {@link Cluster#HOST_LEASE_CAP} per stripe and node; the picks past that are library leases,
     * which the collector releases.
     */
    @Test
    void unpinnedHostLeasesDroppedWithoutReleaseStayBounded() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = dropped-unpinned\nnodes = a, b")) {
            for (int i = 0; i < 1000; i++) {
                c.pick(); // dropped
            }
            int[] ids = c.nodeIds();
            for (int n : ids) {
                assertTrue(inFlight(c, n) <= Cluster.HOST_LEASE_CAP, "host leases: " + inFlight(c, n));
            }
            boolean bounded = io.racaffinity.testsupport.Await.until(java.time.Duration.ofSeconds(20),
                    java.time.Duration.ofMillis(50), () -> {
                        System.gc();
                        return c.nodeMetrics().stream().allMatch(m -> m.inFlight() <= Cluster.HOST_LEASE_CAP);
                    });
            assertTrue(bounded, "in flight after GC: " + c.nodeMetrics());
        }
    }

    /** A fast path that ended a FAILED on the page would leave the node up: the core never saw the failures. */
    @Test
    void unpinnedFailedReleasesReachTheCoreAndEjectTheNode() {
        try (Cluster c = Cluster.fromConfig("name = failed\nnodes = a, b\nhealth.eject_after_failures = 2")) {
            int a = c.nodeIds()[0];
            balancedLeaseOn(c, a).release(Outcome.FAILED);
            assertEquals(NodeState.UP, c.nodeState(a));
            balancedLeaseOn(c, a).release(Outcome.FAILED);
            NodeMetrics m = metrics(c, a);
            assertEquals(NodeState.DOWN, m.state(), "two FAILED releases eject the node");
            assertEquals("ejected", m.downCause());
            assertEquals(2, m.failures());
            assertEquals(0, m.inFlight());
        }
    }

    /**
     * A lease in flight at an ejection is stale: its end, whatever the
     * outcome, must reach the core, which discounts it so that it is not
     * taken for the half-open trial. Ended on the page instead (the epoch
     * check skipped), the stale NEUTRAL stays counted as pending and the
     * trial's own OK is discounted in its place: the node would stay down.
     */
    @Test
    void anUnpinnedLeaseHeldAcrossAnEjectionEndsInTheCoreSoTheTrialCounts() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = stale\nnodes = a, b\nhealth.eject_after_failures = 1\n"
                + "health.eject_backoff = 100ms")) {
            int a = c.nodeIds()[0];
            Lease stale = balancedLeaseOn(c, a);
            assertEquals(1, inFlight(c, a));
            c.reportOutcome(a, false);
            assertEquals(NodeState.DOWN, c.nodeState(a));
            stale.release(Outcome.NEUTRAL);
            assertEquals(0, inFlight(c, a));

            Lease trial = null;
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (trial == null && System.nanoTime() < deadline) {
                Lease l = c.pick();
                if (l.node() == a) {
                    trial = l;
                } else {
                    l.release(Outcome.NEUTRAL);
                    Thread.sleep(5);
                }
            }
            assertTrue(trial != null, "no trial on a within 10 s of a 100 ms back-off");
            assertEquals(0, inFlight(c, a), "the half-open trial is the library's lease, not a host lease");
            trial.release(Outcome.OK);
            assertEquals(NodeState.UP, c.nodeState(a), "the trial's success lifts the ejection");
            assertEquals(0, metrics(c, a).inFlight());
        }
    }
}
