package io.racaffinity;

import static io.racaffinity.HostLeases.inFlight;
import static io.racaffinity.HostLeases.metrics;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import org.junit.jupiter.api.Test;

/**
 * A host lease ({@link Cluster#pick()} served from a pinned thread's cached
 * route) whose node changes state while the lease is held: its release must
 * reach the core as a library lease's would, since the epoch moved. The
 * semantics are the core's (rust/core/tests/host_leases.rs): every OK end is
 * a success, a lease in flight at an ejection is discounted and never taken
 * for the half-open trial, and nothing stays in flight.
 */
class HostLeaseEndTest {
    /** A pinned thread's pick served from its cache: proven a host lease by the page. */
    private static Lease hostLease(Cluster c, int node) throws ReflectiveOperationException {
        c.route(); // caches the pin
        Lease l = c.pick();
        assertEquals(node, l.node());
        assertEquals(RouteKind.AFFINITY, l.kind());
        assertEquals(1, inFlight(c, node), "the pick is a host lease, counted in the page");
        return l;
    }

    /**
     * Host leases taken in a pin and dropped without a release: they have no cleaner (that would cost more
     * than the lease), so at most {@link Cluster#HOST_LEASE_CAP} of them per stripe and node are host leases;
     * the picks past that are library leases, which the garbage collector releases. Before the fix 1,000
     * dropped leases stayed 1,000 in flight after GC, biasing least_outstanding away from the node for good.
     */
    @Test
    void hostLeasesDroppedWithoutReleaseStayBoundedAndTheRestAreReleasedByTheGc() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = dropped\nnodes = a, b")) {
            Pin pin = c.pin();
            int a = pin.node();
            c.route(); // caches the pin
            for (int i = 0; i < 1000; i++) {
                assertEquals(a, c.pick().node()); // dropped
            }
            assertTrue(inFlight(c, a) <= Cluster.HOST_LEASE_CAP, "host leases: " + inFlight(c, a));
            boolean bounded = io.racaffinity.testsupport.Await.until(java.time.Duration.ofSeconds(20),
                    java.time.Duration.ofMillis(50), () -> {
                        System.gc();
                        return metrics(c, a).inFlight() <= Cluster.HOST_LEASE_CAP;
                    });
            assertTrue(bounded, "in flight after GC: " + metrics(c, a).inFlight());
            // the page still serves the pinned thread once its leases are released
            pin.close();
        }
    }

    @Test
    void aStaleOkOfAHostLeaseHeldAcrossAnEjectionIsNoTrial() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = eject\nnodes = a, b\nhealth.eject_after_failures = 1\n"
                + "health.eject_backoff = 100ms")) {
            Pin pin = c.pin();
            int a = pin.node();
            Lease stale = hostLease(c, a);
            c.reportOutcome(a, false);
            assertEquals(NodeState.DOWN, c.nodeState(a));
            assertEquals("ejected", metrics(c, a).downCause());
            assertEquals(1, metrics(c, a).inFlight(), "the stale lease is still in flight");

            // After the back-off the next balanced pick on a is the half-open trial.
            pin.close();
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

            stale.release(Outcome.OK);
            assertEquals(NodeState.DOWN, c.nodeState(a), "a lease begun before the ejection must not close the trial");
            trial.release(Outcome.OK);
            assertEquals(NodeState.UP, c.nodeState(a), "the trial's own success lifts the ejection");
            NodeMetrics m = metrics(c, a);
            assertEquals(0, m.inFlight());
            assertEquals(0, inFlight(c, a));
            assertEquals(2, m.successes(), "each OK end is a success, the stale one too");
            assertEquals(1, m.failures());
        }
    }

    @Test
    void aHostLeaseHeldAcrossAnEventDownEndsInTheCoreAndLeavesTheNodeDown() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = event\nnodes = MYDB1, MYDB2\ndatabase = orcl\nservice = svc\n"
                + "health.eject_after_failures = 2")) {
            Pin pin = c.pin();
            int a = pin.node();
            Lease held = hostLease(c, a);
            assertEquals(1, c.applyEvent("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance="
                    + pin.nodeName() + " host=h status=down reason=FAILURE card=1 timestamp=2026-12-02 03:00:00"));
            assertEquals(NodeState.DOWN, c.nodeState(a));

            held.release(Outcome.OK);
            NodeMetrics m = metrics(c, a);
            assertEquals(NodeState.DOWN, m.state(), "an OK is no evidence against the event");
            assertEquals("event", m.downCause());
            assertEquals(0, m.inFlight());
            assertEquals(0, inFlight(c, a));
            assertEquals(1, m.successes());
            // The thread's pin moved at the Down; its next pick is on the other node.
            try (Lease next = c.pick()) {
                assertNotEquals(a, next.node());
            }
        }
    }

    @Test
    void aHostLeaseHeldAcrossTheRemovalOfItsNodeIsReleasedQuietly() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = removal\nnodes = a, b, c")) {
            Pin pin = c.pin();
            int a = pin.node();
            Lease held = hostLease(c, a);
            c.removeNode(pin.nodeName());

            held.release(Outcome.OK);
            assertTrue(held.isReleased());
            assertEquals(0, inFlight(c, a), "the removed node's host lease word is back to 0");
            assertFalse(Arrays.stream(c.nodeIds()).anyMatch(id -> id == a), "the node stays removed");
            assertEquals(NodeState.DOWN, c.nodeState(a));
            for (NodeMetrics m : c.nodeMetrics()) {
                assertEquals(0, m.inFlight(), m.toString());
                assertEquals(0, m.successes(), "the OK counted on no live node: " + m);
            }
            try (Lease next = c.pick()) {
                assertNotEquals(a, next.node());
            }
        }
    }
}
