package io.racaffinity.jdbc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.racaffinity.test.Stubs;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Fast connection failover's slots ({@link NodeFailover}), without a server: a Down finds every
 * connection held on its node however many there are, and none given back; a kick sends a waiting
 * thread on and leaves no interrupt behind once the thread's wait is over, however the two race.
 * FastFailoverTest runs the same through real pools and a real {@code kill -9}.
 */
class NodeFailoverTest {
    private ExecutorService threads;

    @AfterEach
    void stop() {
        if (threads != null) {
            threads.shutdownNow();
        }
    }

    /** A connection stub that counts its aborts into {@code aborted}. */
    private static Connection conn(String name, Set<String> aborted) {
        return Stubs.proxy(Connection.class, name, (p, m, args) -> {
            if (m.getName().equals("abort")) {
                aborted.add(name);
            }
            return null;
        });
    }

    /** Borrows {@code c} on {@code node} as AffinityDataSource does: wait in a slot, then keep it there. */
    private static int borrow(NodeFailover f, int node, Connection c) {
        int slot = f.waiting(node);
        assertFalse(f.done(node, slot, c), "not kicked");
        return slot;
    }

    @Test
    void aDownAbortsEveryConnectionHeldOnItsNodeAndNoneGivenBack() {
        NodeFailover f = new NodeFailover(2);
        Set<String> aborted = ConcurrentHashMap.newKeySet();
        int n = NodeFailover.SEGMENT + 44; // past one segment of slots
        int[] slots = new int[n];
        Set<Integer> distinct = new HashSet<>();
        for (int i = 0; i < n; i++) {
            slots[i] = borrow(f, 0, conn("a" + i, aborted));
            assertTrue(distinct.add(slots[i]), "slot " + slots[i] + " given twice");
        }
        for (int i = 0; i < 5; i++) {
            borrow(f, 1, conn("b" + i, aborted));
        }
        Set<String> stillHeld = new HashSet<>();
        for (int i = 0; i < n; i++) {
            if (i % 10 == 3) {
                f.returned(0, slots[i]);
            } else {
                stillHeld.add("a" + i);
            }
        }
        assertEquals(stillHeld.size(), abortAll(f, 0));
        assertEquals(stillHeld, aborted, "exactly the connections still held on node 0");
        assertEquals(0, f.waiters(0));

        // A slot given back is taken again: the node keeps the slots its peak needed, no more.
        int again = borrow(f, 0, conn("again", aborted));
        assertTrue(again < n, "slot " + again);
    }

    @Test
    void aNodePastTheFirstKeepsItsOwnSlotsPastOneSegmentToo() {
        // Every node's first segment lives in one shared array, later ones apart: node 2's slots,
        // past its first segment, are its own and nobody else's.
        NodeFailover f = new NodeFailover(3);
        Set<String> aborted = ConcurrentHashMap.newKeySet();
        int n = 2 * NodeFailover.SEGMENT + 7;
        int[] slots = new int[n];
        Set<Integer> distinct = new HashSet<>();
        for (int i = 0; i < n; i++) {
            slots[i] = borrow(f, 2, conn("c" + i, aborted));
            assertTrue(distinct.add(slots[i]), "slot " + slots[i] + " given twice");
        }
        borrow(f, 1, conn("b", aborted));
        Set<String> stillHeld = new HashSet<>();
        for (int i = 0; i < n; i++) {
            if (i % 7 == 2) {
                f.returned(2, slots[i]);
            } else {
                stillHeld.add("c" + i);
            }
        }
        assertEquals(0, abortAll(f, 0));
        assertEquals(Set.of(), aborted, "node 0 holds nothing");
        assertEquals(stillHeld.size(), abortAll(f, 2));
        assertEquals(stillHeld, aborted, "exactly the connections still held on node 2");
        assertEquals(1, abortAll(f, 1));
    }

    @Test
    void connectionsBorrowedFromManyThreadsAtOnceEachGetASlotOfTheirOwn() throws Exception {
        NodeFailover f = new NodeFailover(1);
        Set<String> aborted = ConcurrentHashMap.newKeySet();
        int nThreads = 8;
        int each = 60;
        threads = Executors.newFixedThreadPool(nThreads);
        CountDownLatch go = new CountDownLatch(1);
        List<Future<List<Integer>>> held = new ArrayList<>();
        for (int t = 0; t < nThreads; t++) {
            int id = t;
            held.add(threads.submit(() -> {
                go.await();
                List<Integer> mine = new ArrayList<>();
                for (int i = 0; i < each * 4; i++) {
                    int slot = borrow(f, 0, conn("t" + id + "-" + i, aborted));
                    if (i % 4 == 0) {
                        mine.add(slot); // kept
                    } else {
                        f.returned(0, slot);
                    }
                }
                return mine;
            }));
        }
        go.countDown();
        Set<Integer> all = new HashSet<>();
        for (Future<List<Integer>> h : held) {
            for (int slot : h.get(60, TimeUnit.SECONDS)) {
                assertTrue(all.add(slot), "slot " + slot + " held by two connections");
            }
        }
        assertEquals(nThreads * each, abortAll(f, 0));
        assertEquals(nThreads * each, aborted.size());
    }

    @Test
    void aKickSendsAWaitingThreadOnButNotOneTheApplicationInterrupted() throws Exception {
        NodeFailover f = new NodeFailover(1);
        threads = Executors.newFixedThreadPool(2);
        CountDownLatch never = new CountDownLatch(1);
        CountDownLatch waiting = new CountDownLatch(1);
        Future<Boolean[]> waiter = threads.submit(() -> {
            int slot = f.waiting(0);
            waiting.countDown();
            boolean interrupted = false;
            try {
                never.await(); // a pool's wait: given up on an interrupt
            } catch (InterruptedException e) {
                interrupted = true;
            }
            boolean kicked = f.done(0, slot, null);
            return new Boolean[] {interrupted, kicked, Thread.currentThread().isInterrupted()};
        });
        assertTrue(waiting.await(30, TimeUnit.SECONDS));
        assertEquals(1, f.waiters(0));
        assertEquals(1, f.kickWaiters(0));
        Boolean[] r = waiter.get(30, TimeUnit.SECONDS);
        assertTrue(r[0], "the wait was interrupted");
        assertTrue(r[1], "done() says the node went Down");
        assertFalse(r[2], "and leaves no interrupt of ours on the thread");
        assertEquals(0, f.waiters(0));

        // A thread the application interrupted keeps its interrupt and is not counted as sent on.
        CountDownLatch interruptedByApp = new CountDownLatch(1);
        AtomicBoolean kickDone = new AtomicBoolean();
        Future<Boolean[]> appInterrupted = threads.submit(() -> {
            int slot = f.waiting(0);
            Thread.currentThread().interrupt();
            interruptedByApp.countDown();
            while (!kickDone.get()) {
                Thread.onSpinWait(); // not a wait that an interrupt ends
            }
            boolean kicked = f.done(0, slot, null);
            return new Boolean[] {kicked, Thread.currentThread().isInterrupted()};
        });
        assertTrue(interruptedByApp.await(30, TimeUnit.SECONDS));
        int sent = f.kickWaiters(0);
        kickDone.set(true);
        Boolean[] a = appInterrupted.get(30, TimeUnit.SECONDS);
        assertEquals(0, sent);
        assertFalse(a[0], "not kicked");
        assertTrue(a[1], "the application's interrupt is still there");
    }

    @Test
    void noKickInterruptOutlivesTheWaitHoweverTheyRace() throws Exception {
        NodeFailover f = new NodeFailover(1);
        threads = Executors.newFixedThreadPool(2);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicInteger kicks = new AtomicInteger();
        Future<?> kicker = threads.submit(() -> {
            while (!stop.get()) {
                kicks.addAndGet(f.kickWaiters(0));
            }
        });
        Future<int[]> borrower = threads.submit(() -> {
            int leftOver = 0;
            int kicked = 0;
            for (int i = 0; i < 200_000; i++) {
                int slot = f.waiting(0);
                for (int k = i % 64; k > 0; k--) {
                    Thread.onSpinWait(); // waits of many lengths, for the kicks to land in
                }
                if (f.done(0, slot, null)) {
                    kicked++;
                }
                if (Thread.interrupted()) {
                    leftOver++;
                }
            }
            return new int[] {leftOver, kicked};
        });
        int[] r;
        try {
            r = borrower.get(120, TimeUnit.SECONDS);
        } finally {
            stop.set(true);
        }
        kicker.get(30, TimeUnit.SECONDS);
        assertEquals(0, r[0], "interrupts left on the thread after its wait was over");
        assertEquals(kicks.get(), r[1], "every kick counted is seen by its waiter");
    }

    /** Aborts what node {@code node} holds and waits for every abort: the connections found. */
    private static int abortAll(NodeFailover f, int node) {
        List<Thread> aborting = f.abortBorrowed(node, "nodefailover-test-abort", c -> {});
        for (Thread t : aborting) {
            try {
                t.join();
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        }
        return aborting.size();
    }
}
