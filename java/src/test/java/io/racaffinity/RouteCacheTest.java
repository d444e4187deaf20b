package io.racaffinity;

import static io.racaffinity.HostLeases.metrics;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.VirtualThreads;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link Cluster#route()} serves a pinned thread's route from a thread-local
 * cache while the core's routing epoch is unchanged. These tests hold it to
 * the core's answers: no cached route outlives a Down, a removal or an
 * ejection, strict scopes refuse and soft scopes re-pin at once, every hit is
 * counted, and closing a cluster under cached pins is safe.
 */
class RouteCacheTest {
    private static Cluster cluster(String extra) {
        return Cluster.fromConfig("name = cache\nnodes = n0, n1, n2, n3, n4, n5\n" + extra);
    }

    private static Thread platformThread(Runnable r) {
        Thread t = new Thread(r);
        t.start();
        return t;
    }

    private static long scopeCounter(String json, String field) {
        Matcher m = Pattern.compile("\"thread\":\\{[^}]*\"" + field + "\":(\\d+)").matcher(json);
        assertTrue(m.find(), "thread scope " + field + " in " + json);
        return Long.parseLong(m.group(1));
    }

    @Test
    void hitsServedByTheCacheAreCountedInJsonPrometheusAndNodeMetrics() {
        try (Cluster c = cluster("")) {
            Pin pin = c.pin();
            for (int i = 0; i < 1000; i++) {
                assertEquals(pin.node(), c.route().node());
            }
            NodeMetrics m = c.nodeMetrics().get(pin.node());
            assertEquals(1001, m.picks(), "the pin's placement and 1000 routes");
            assertEquals(1000, m.affinityHits());
            assertEquals(1000, scopeCounter(c.metricsJson(), "hits"));
            assertTrue(c.metricsPrometheus().contains(
                    "racaffinity_node_affinity_hits_total{cluster=\"cache\",node=\"" + pin.nodeName() + "\"} 1000"),
                    c.metricsPrometheus());
        }
    }

    @Test
    void softScopeRepinsAndStrictScopeRefusesAtOnceAfterDown() {
        try (Cluster c = cluster("")) {
            Pin pin = c.pin();
            c.route();
            c.route();
            c.setNodeState(pin.nodeName(), NodeState.DOWN);
            Route r = c.route();
            assertNotEquals(pin.node(), r.node());
            assertEquals(RouteKind.REPINNED, r.kind());
        }
        try (Cluster c = cluster("thread.strict = true")) {
            Pin pin = c.pin();
            c.route();
            c.route();
            c.setNodeState(pin.nodeName(), NodeState.DOWN);
            assertThrows(StrictAffinityException.class, c::route);
        }
    }

    @Test
    void unpinningFromAnotherThreadEndsTheCachedPin() throws Exception {
        try (Cluster c = cluster("")) {
            Pin pin = c.pin();
            c.route();
            Thread t = new Thread(pin::close);
            t.start();
            t.join();
            assertTrue(c.pinnedNode().isEmpty());
            assertEquals(RouteKind.BALANCED, c.route().kind());
        }
    }

    /** A change the flipper made; the clock values its getAndIncrement returned before and after. */
    private record Transition(long began, long done, boolean unavailable, String what) {}

    /** Whether a node was unavailable for the whole of a route that read the clock as begin and end. */
    private static boolean downThroughout(List<Transition> log, long begin, long end) {
        Transition last = null;
        Transition next = null;
        for (Transition t : log) {
            if (t.done() < begin) {
                last = t;
            } else {
                next = t;
                break;
            }
        }
        return last != null && last.unavailable() && (next == null || next.began() >= end);
    }

    private static void stress(Function<Runnable, Thread> start, int routers, int routes) throws Exception {
        stress(start, routers, routes, false);
    }

    /** With {@code leases}, every other route is a {@link Cluster#pick()} released OK or NEUTRAL. */
    private static void stress(Function<Runnable, Thread> start, int routers, int routes, boolean leases)
            throws Exception {
        try (Cluster c = cluster("health.eject_after_failures = 3\nhealth.eject_backoff = 1h\n"
                + "health.eject_backoff_max = 1h")) {
            AtomicLong clock = new AtomicLong(1);
            AtomicBoolean stop = new AtomicBoolean();
            Map<Integer, List<Transition>> log = new HashMap<>();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            Thread flipper = new Thread(() -> {
                Random rnd = new Random(0x5eed);
                int added = 0;
                while (!stop.get()) {
                    List<Integer> live = new ArrayList<>();
                    for (int id : c.nodeIds()) {
                        if (id != 0) { // n0 never changes, so a soft re-pin always finds a node
                            live.add(id);
                        }
                    }
                    int node = live.get(rnd.nextInt(live.size()));
                    String name = c.nodeName(node);
                    long began = clock.getAndIncrement();
                    Boolean unavailable;
                    int op = rnd.nextInt(10);
                    if (op <= 2) {
                        c.setNodeState(name, NodeState.DOWN);
                        unavailable = true;
                    } else if (op <= 5) {
                        c.setNodeState(name, NodeState.UP);
                        unavailable = false;
                    } else if (op == 6) {
                        for (int i = 0; i < 3; i++) {
                            c.reportOutcome(node, false);
                        }
                        unavailable = c.nodeState(node) == NodeState.DOWN ? Boolean.TRUE : null;
                    } else if (op == 7) {
                        c.applyEvent("VERSION=1.0 database=orcl service=svc { {instance=" + name
                                + " percent=30 flag=GOOD aff=" + (rnd.nextBoolean() ? "TRUE" : "FALSE")
                                + "} } timestamp=x");
                        unavailable = null;
                    } else if (op == 8 && live.size() > 3) {
                        c.removeNode(name);
                        unavailable = true;
                    } else {
                        c.addNode("m" + ++added, null, 1);
                        unavailable = null;
                    }
                    long done = clock.getAndIncrement();
                    if (unavailable != null) {
                        synchronized (log) {
                            log.computeIfAbsent(node, k -> new ArrayList<>())
                                    .add(new Transition(began, done, unavailable, name + " op " + op));
                        }
                    }
                }
            });
            flipper.start();

            long[][] seen = new long[routers][];
            AtomicLongArray oks = new AtomicLongArray(1 << 16); // by node id
            CountDownLatch done = new CountDownLatch(routers);
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < routers; t++) {
                int me = t;
                threads.add(start.apply(() -> {
                    try {
                        long[] mine = new long[routes * 3];
                        c.pin();
                        for (int i = 0; i < routes; i++) {
                            long begin = clock.get();
                            int node;
                            if (leases && (i & 1) == 1) {
                                Lease lease = c.pick();
                                node = lease.node();
                                if (i % 10 == 1) {
                                    lease.release(Outcome.NEUTRAL);
                                } else {
                                    lease.release(Outcome.OK);
                                    oks.incrementAndGet(node);
                                }
                            } else {
                                node = c.route().node();
                            }
                            long end = clock.get();
                            mine[3 * i] = begin;
                            mine[3 * i + 1] = end;
                            mine[3 * i + 2] = node;
                            if ((i & 255) == 0) {
                                Thread.yield(); // on two cores, let the flipper run between routes
                            }
                        }
                        seen[me] = mine;
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    } finally {
                        done.countDown();
                    }
                }));
            }
            done.await();
            for (Thread t : threads) {
                t.join();
            }
            stop.set(true);
            flipper.join();
            if (failure.get() != null) {
                throw new AssertionError("a router failed", failure.get());
            }
            assertTrue(clock.get() > 100, "the flipper made only " + clock.get() / 2 + " changes");

            List<String> violations = new ArrayList<>();
            for (long[] mine : seen) {
                for (int i = 0; i < routes; i++) {
                    List<Transition> l = log.getOrDefault((int) mine[3 * i + 2], Collections.emptyList());
                    if (downThroughout(l, mine[3 * i], mine[3 * i + 1])) {
                        violations.add("node " + mine[3 * i + 2] + " in [" + mine[3 * i] + ", " + mine[3 * i + 1]
                                + "]: " + l);
                    }
                }
            }
            assertTrue(violations.isEmpty(), violations.size() + " routes returned an unavailable node, e.g. "
                    + (violations.isEmpty() ? "" : violations.get(0)));

            // Every route was a pinned-context route (placed, honoured or re-pinned),
            // counted once whether the core or the thread's cache answered.
            String json = c.metricsJson();
            long counted = scopeCounter(json, "hits") + scopeCounter(json, "placements")
                    + scopeCounter(json, "repins") + scopeCounter(json, "panics");
            assertEquals((long) routers * (routes + 1), counted, json);
            if (leases) {
                // Removed nodes leave the metrics; every live one must be exact.
                for (NodeMetrics m : c.nodeMetrics()) {
                    assertEquals(0, m.inFlight(), "every lease was released: " + m);
                    assertEquals(oks.get(m.node()), m.successes(), "each OK release is one success: " + m);
                }
            }
        }
    }

    @Test
    void leasesOnCachedPinsNeverOutliveADownRemovalOrEjectionAndCountExactly() throws Exception {
        stress(RouteCacheTest::platformThread, 4, 100_000, true);
    }

    @Test
    @Tag("virtual-threads")
    void leasesOnCachedPinsCountExactlyOnVirtualThreads() throws Exception {
        VirtualThreads.assumeAvailable();
        stress(VirtualThreads::start, 64, 10_000, true);
    }

    @Test
    void aPinnedThreadsLeasesCountInFlightForBalancingAndHealth() throws Exception {
        try (Cluster c = Cluster.fromConfig("name = lo\nnodes = a, b\npolicy = least_outstanding\n"
                + "health.eject_after_failures = 2")) {
            Pin pin = c.pin();
            c.route(); // cached from here on
            List<Lease> held = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                held.add(c.pick());
            }
            assertEquals(5, metrics(c, pin.node()).inFlight());
            // Another, unpinned thread balances around the pinned thread's leases.
            AtomicReference<Integer> other = new AtomicReference<>();
            Thread t = new Thread(() -> {
                int n = -1;
                for (int i = 0; i < 100; i++) {
                    try (Lease l = c.pick()) {
                        if (n >= 0 && n != l.node()) {
                            n = -2;
                        } else if (n != -2) {
                            n = l.node();
                        }
                    }
                }
                other.set(n);
            });
            t.start();
            t.join();
            assertEquals(1 - pin.node(), other.get(), "least_outstanding must avoid the node holding 5 leases");
            for (Lease l : held) {
                l.release(Outcome.OK);
            }
            assertThrows(InvalidLeaseException.class, () -> held.get(0).release(Outcome.OK));
            NodeMetrics m = metrics(c, pin.node());
            assertEquals(0, m.inFlight());
            assertEquals(5, m.successes());
            // Failures always reach the core: two in a row eject the pinned node.
            c.pick().release(Outcome.FAILED);
            c.pick().release(Outcome.FAILED);
            assertEquals(NodeState.DOWN, c.nodeState(pin.node()));
            assertEquals(2, metrics(c, pin.node()).failures());
        }
    }

    @Test
    void aLeaseHeldAcrossCloseIsReleasedSafely() {
        Cluster c = cluster("");
        c.pin();
        c.route();
        Lease first = c.pick();
        Lease second = c.pick();
        c.close();
        first.close(); // the epoch moved at close: the slow path finds the cluster closed, quietly
        assertTrue(first.isReleased());
        assertThrows(ClusterClosedException.class, () -> second.release(Outcome.OK));
        assertThrows(InvalidLeaseException.class, () -> second.release(Outcome.OK));
    }

    @Test
    void cachedPinsNeverOutliveADownRemovalOrEjectionOnPlatformThreads() throws Exception {
        stress(RouteCacheTest::platformThread, 4, 100_000);
    }

    @Test
    @Tag("virtual-threads")
    void cachedPinsNeverOutliveADownRemovalOrEjectionOnVirtualThreads() throws Exception {
        VirtualThreads.assumeAvailable();
        stress(VirtualThreads::start, 64, 10_000);
    }


    @Test
    void closingAClusterUnderCachedPinsIsSafe() throws Exception {
        for (int round = 0; round < 20; round++) {
            Cluster c = cluster("");
            AtomicBoolean closed = new AtomicBoolean();
            AtomicReference<Throwable> wrong = new AtomicReference<>();
            CountDownLatch pinned = new CountDownLatch(4);
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                Thread th = new Thread(() -> {
                    c.pin();
                    pinned.countDown();
                    try {
                        while (true) {
                            boolean wasClosed = closed.get();
                            c.route();
                            if (wasClosed) {
                                wrong.compareAndSet(null, new AssertionError("a route succeeded after close"));
                                return;
                            }
                        }
                    } catch (ClusterClosedException expected) {
                        // the cached pins missed, and the core reported the close
                    } catch (Throwable e) {
                        wrong.compareAndSet(null, e);
                    }
                });
                th.start();
                threads.add(th);
            }
            pinned.await();
            c.close();
            closed.set(true);
            for (Thread th : threads) {
                th.join();
            }
            if (wrong.get() != null) {
                throw new AssertionError(wrong.get());
            }
        }
        // The clusters and their epoch pages are unreachable now: a collection
        // lets the cleaner free the pages while other tests keep routing.
        System.gc();
    }
}
