package io.racaffinity.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.racaffinity.Cluster;
import io.racaffinity.Lease;
import io.racaffinity.Outcome;
import io.racaffinity.Route;
import io.racaffinity.test.Pools;
import io.racaffinity.test.RollbackOnlyTm;
import io.racaffinity.test.SlowToUnwind;
import io.racaffinity.test.Threads;
import jakarta.transaction.Status;
import jakarta.transaction.TransactionSynchronizationRegistry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Threads of one transaction whose TM refuses synchronizations (Narayana once it is rollback-only) racing for
 * their first connection: every reference they take in the core must end with the transaction. No database:
 * a TM and registry stand-in hold both threads past the "already followed?" checks.
 */
class TransactionAffinityRaceTest {
    private final RollbackOnlyTm tm = new RollbackOnlyTm("tx-key-race");

    /** The stand-in's registry, holding {@code threads} joining threads together until each is refused. */
    private TransactionSynchronizationRegistry together(int threads) {
        CyclicBarrier together = new CyclicBarrier(threads);
        tm.beforeRefusing(() -> {
            try {
                together.await(5, TimeUnit.SECONDS);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        return tm.registry();
    }

    private static long live(Cluster c) throws Exception {
        var n = new com.fasterxml.jackson.databind.ObjectMapper().readTree(c.metricsJson());
        return n.path("scopes").path("transaction").path("live").asLong(-1);
    }

    private void firstConnectionsOfOneTransaction(int threads) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try (Cluster c = Cluster.fromConfig("name = jta-race; nodes = RAC1, RAC2, RAC3")) {
            TransactionAffinity ta = TransactionAffinity.of(c, together(threads), tm.manager());
            try {
                Future<?>[] joins = new Future<?>[threads];
                for (int i = 0; i < threads; i++) {
                    joins[i] = pool.submit(ta::join);
                }
                String node = null;
                for (Future<?> f : joins) {
                    TransactionAffinity.Joined j = (TransactionAffinity.Joined) f.get(10, TimeUnit.SECONDS);
                    String n = j.placed() != null ? j.placed().nodeName() : c.txRoute(j.gtrid()).nodeName();
                    assertTrue(node == null || node.equals(n), "one transaction, one node: " + node + ", " + n);
                    node = n;
                }
                assertEquals(1, live(c));
                tm.setStatus(Status.STATUS_ROLLEDBACK);
                assertTrue(Pools.await(Duration.ofSeconds(5), () -> {
                    try {
                        return live(c) == 0;
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }), "the rolled-back transaction's gtrid stays live in the core: " + live(c));
            } finally {
                ta.close();
            }
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void oneThreadsRollbackOnlyTransactionEndsInTheCore() throws Exception {
        firstConnectionsOfOneTransaction(1);
    }

    @Test
    void twoThreadsRacingIntoOneRollbackOnlyTransactionLeaveNothingInTheCore() throws Exception {
        firstConnectionsOfOneTransaction(2);
    }

    /**
     * close() comes while the sweeper is asking a transaction its status (a TM call that, interrupted, takes a
     * moment to unwind): once close() returns the sweeper's thread is gone, as the heartbeat's are
     * (CloseLeavesNoThreadsTest), for an application server checking an undeployed application's threads while
     * another application's cluster stays open.
     */
    @Test
    void noSweeperThreadOutlivesCloseWhileASweepIsUnderWay() throws Exception {
        CountDownLatch sweeping = new CountDownLatch(1);
        tm.onSweep(() -> {
            sweeping.countDown();
            SlowToUnwind.untilInterrupted(300);
        });
        try (Cluster other = Cluster.fromConfig("name = jta-closesweep-other; nodes = X");
                Cluster c = Cluster.fromConfig("name = jta-closesweep; nodes = RAC1, RAC2")) {
            TransactionAffinity ta = TransactionAffinity.of(c, tm.registry(), tm.manager());
            try {
                ta.join();
                assertTrue(sweeping.await(30, TimeUnit.SECONDS), "the sweeper never looked at the transaction");
            } finally {
                ta.close();
            }
            assertEquals(List.of(), Threads.describe(Threads.named("racaffinity-jta-sweep-jta-closesweep")),
                    "threads left running after close()");
        }
    }

    /**
     * Without a TransactionManager a transaction the TM takes no synchronization for cannot be watched to its end,
     * so each connection placed it afresh and ended it at once: one rollback-only transaction's connections went
     * to several nodes. Such an affinity is refused instead.
     */
    @Test
    void withoutATransactionManagerTheAffinityIsRefusedRatherThanSplitARollbackOnlyTransaction() {
        try (Cluster c = Cluster.fromConfig("name = jta-no-tm; nodes = RAC1, RAC2, RAC3")) {
            java.util.Map<Integer, String> owners = new java.util.HashMap<>();
            for (int p = 0; p < 4096; p++) {
                owners.put(p, "RAC" + (1 + p % 3));
            }
            c.replacePartitionMap(owners, "test");
            TransactionAffinity ta;
            try {
                ta = TransactionAffinity.of(c, tm.registry(), null);
            } catch (IllegalArgumentException e) {
                assertTrue(e.getMessage().contains("TransactionManager"), e.getMessage());
                return;
            }
            Set<String> nodes = new TreeSet<>();
            List<Lease> open = new ArrayList<>();
            try {
                for (int i = 0; i < 6; i++) {
                    // Each connection of the transaction is open (holds its lease) when the next one is asked for.
                    // Each connection carries its own data key: a transaction already placed does not move for it.
                    TransactionAffinity.Joined j = ta.joinFor(("key-" + i).getBytes(StandardCharsets.UTF_8), null);
                    Route r = j.placed() != null ? j.placed() : c.txRoute(j.gtrid());
                    nodes.add(r.nodeName());
                    open.add(c.lease(r));
                }
            } finally {
                open.forEach(l -> l.release(Outcome.OK));
                ta.close();
            }
            fail("accepted without a TransactionManager: one rollback-only transaction's 6 connections went to "
                    + nodes);
        }
    }
}
