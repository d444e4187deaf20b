package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;

/**
 * A cluster the caller never closed is not freed by the collector while one of its own calls
 * is still running. Once compiled, a method whose last use of {@code this} is reading the
 * handle leaves the cluster unreachable during its native call; a collection then lets the
 * cleaner free the handle before the library looked it up, and the call failed with
 * {@link ClusterClosedException}. {@code replacePartitionMap} converts its 4096 node names
 * before the lookup, a window of a few milliseconds that a collection looping on another
 * thread hits about once in ten calls.
 */
class ReachabilityTest {
    @Test
    void aClusterIsNotFreedWhileOneOfItsCallsRuns() throws InterruptedException {
        Map<Integer, String> map = new HashMap<>();
        for (int p = 0; p < 4096; p++) {
            map.put(p, p % 2 == 0 ? "A" : "B");
        }
        AtomicBoolean stop = new AtomicBoolean();
        Thread collector = new Thread(() -> {
            while (!stop.get()) {
                System.gc();
            }
        }, "reachability-gc");
        collector.setDaemon(true);
        collector.start();
        List<String> failures = new ArrayList<>();
        int calls = 0;
        try {
            long deadline = System.nanoTime() + 12_000_000_000L;
            for (; calls < 200 && failures.isEmpty() && System.nanoTime() < deadline; calls++) {
                try {
                    // The cluster's only reference is the receiver of the call.
                    Cluster.fromConfig("nodes = A, B").replacePartitionMap(map, "src");
                } catch (ClusterClosedException e) {
                    failures.add("call " + calls + ": " + e);
                }
            }
        } finally {
            stop.set(true);
            collector.join();
        }
        assertEquals(List.of(), failures, "a cluster nobody closed was freed during its call (" + calls + " calls)");
    }
}
