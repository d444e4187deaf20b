package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.Pin;
import io.racaffinity.test.Pools;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * N threads pin at the same time (a barrier holds every pin open together),
 * then each takes several connections: every connection of a thread must be
 * on its own pinned node, whatever the other threads pinned.
 */
final class PinIsolation {
    /** carrier OS thread name → pinned nodes of the (virtual) threads it ran. */
    final Map<String, Set<String>> nodesPerCarrier = new ConcurrentHashMap<>();
    final Set<String> pinnedNodes = ConcurrentHashMap.newKeySet();
    int connections;

    static String carrier() {
        String s = Thread.currentThread().toString();
        int at = s.indexOf('@');
        return at < 0 ? Thread.currentThread().getName() : s.substring(at + 1);
    }

    void run(AffinityDataSource ds, int threads, int connectionsPerThread, Function<Runnable, Thread> start)
            throws Exception {
        CyclicBarrier allPinned = new CyclicBarrier(threads);
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        java.util.concurrent.atomic.AtomicInteger count = new java.util.concurrent.atomic.AtomicInteger();
        List<Thread> started = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            started.add(start.apply(() -> {
                try (Pin pin = ds.pin()) {
                    String node = pin.nodeName();
                    pinnedNodes.add(node);
                    int expected = AffinityDataSourceTest.portOf(node);
                    allPinned.await(120, TimeUnit.SECONDS);
                    for (int i = 0; i < connectionsPerThread; i++) {
                        nodesPerCarrier.computeIfAbsent(carrier(), k -> ConcurrentHashMap.newKeySet()).add(node);
                        try (Connection c = ds.getConnection()) {
                            int port = Pools.serverPort(c); // blocking I/O: a virtual thread may move carriers
                            if (port != expected) {
                                errors.add(new AssertionError(Thread.currentThread() + " pinned to " + node
                                        + " (port " + expected + ") got a connection on port " + port));
                            }
                            count.incrementAndGet();
                        }
                        nodesPerCarrier.computeIfAbsent(carrier(), k -> ConcurrentHashMap.newKeySet()).add(node);
                    }
                    if (ds.getCluster().pinnedNode().getAsInt() != pin.node()) {
                        errors.add(new AssertionError("pinnedNode() differs from the pin"));
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            }));
        }
        for (Thread t : started) {
            t.join(TimeUnit.MINUTES.toMillis(3));
            assertTrue(!t.isAlive(), t + " did not finish");
        }
        if (!errors.isEmpty()) {
            AssertionError e = new AssertionError(errors.size() + " thread(s) saw another thread's pin or failed");
            errors.stream().limit(5).forEach(e::addSuppressed);
            throw e;
        }
        connections = count.get();
        assertEquals(threads * connectionsPerThread, connections);
        assertTrue(pinnedNodes.size() >= 2, "pins spread over nodes: " + pinnedNodes);
    }
}
