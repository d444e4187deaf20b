package io.racaffinity;

import java.util.concurrent.atomic.AtomicLongArray;

/**
 * A Java thread's pin context and its cached route, kept in an
 * {@link AtomicLongArray}: a JDK type, because it is the value of a
 * {@link ThreadLocal} on threads the application does not own (an app
 * server's request threads). A value of a class of ours there would keep a
 * redeployed web application's class loader alive as long as the thread
 * lives; a {@code long[]}-like value keeps nothing of ours.
 *
 * <p>The cached route may be served without asking the core while the
 * cluster's epoch word still equals {@link #EPOCH} (0: nothing cached; the
 * core's epochs start at 1) and no pin change happened since
 * ({@link #GENERATION} equals {@link #CACHED_GENERATION}). Hits one thread
 * served from its cache on one node are counted in {@link #HIT_COUNT} by the
 * owning thread only (plain writes: the hit path takes no lock); merging,
 * from any thread under the array's monitor, sends what grew since the last
 * merge, so a concurrent hit is merged next time, never lost.
 */
final class ThreadContexts {
    /** The core's context key. */
    static final int KEY = 0;
    /** The epoch the cached route was taken under (0: none). */
    static final int EPOCH = 1;
    /** The cached route, packed as the core returns it. */
    static final int ROUTE = 2;
    /** {@link #GENERATION} when the route was cached. */
    static final int CACHED_GENERATION = 3;
    /** Bumped by pin changes, which a {@link Pin} may make from another thread. */
    static final int GENERATION = 4;
    /** The node the counted hits were served on (-1: none yet). */
    static final int HIT_NODE = 5;
    static final int HIT_COUNT = 6;
    static final int HIT_MERGED = 7;
    /** The byte offset of this thread's stripe of the host lease table (see {@link Cluster#pick()}). */
    static final int LEASE_STRIPE = 8;
    private static final int SLOTS = 9;

    /** Mirrors the core's host lease table (the page after the epoch word). */
    static final int HOST_LEASE_OFFSET = 64;
    static final int HOST_LEASE_NODES = 256;
    static final int HOST_LEASE_STRIPES = 8;
    static final long HOST_LEASE_BEGIN = 1;
    static final long HOST_LEASE_END_OK = (1L << 24) - 1;
    static final long HOST_LEASE_END_NEUTRAL = -1;

    private ThreadContexts() {}

    static AtomicLongArray create(long key) {
        AtomicLongArray c = new AtomicLongArray(SLOTS);
        c.setPlain(KEY, key);
        c.setPlain(HIT_NODE, -1);
        // Threads spread over the stripes by id, so threads pinned to one node
        // do not all add to one cache line.
        long stripe = (Thread.currentThread().getId() * 0x9E3779B97F4A7C15L) >>> 61;
        c.setPlain(LEASE_STRIPE, HOST_LEASE_OFFSET + stripe * HOST_LEASE_NODES * 8L);
        return c;
    }

    /** The stripe whose byte offset {@link #LEASE_STRIPE} holds. */
    static int stripeIndex(long stripeOffset) {
        return (int) ((stripeOffset - HOST_LEASE_OFFSET) / (HOST_LEASE_NODES * 8));
    }

    /** Called after the core changed this context's pin. */
    static void pinChanged(AtomicLongArray c) {
        c.getAndIncrement(GENERATION);
    }

    /** The owner caches a route to {@code to}: what it served on its old node is merged first. */
    static void moveHitsTo(AtomicLongArray c, int to, long handle) {
        synchronized (c) {
            if (to != c.getPlain(HIT_NODE)) {
                mergeHits(c, handle);
                c.setPlain(HIT_NODE, to);
                c.setPlain(HIT_COUNT, 0);
                c.setPlain(HIT_MERGED, 0);
            }
        }
    }

    static void mergeHits(AtomicLongArray c, long handle) {
        synchronized (c) {
            long node = c.getPlain(HIT_NODE);
            long n = c.getPlain(HIT_COUNT) - c.getPlain(HIT_MERGED);
            if (n > 0 && node >= 0) {
                Native.countHostHits(handle, (int) node, n);
                c.setPlain(HIT_MERGED, c.getPlain(HIT_MERGED) + n);
            }
        }
    }
}
