package io.racaffinity;

import java.lang.ref.Cleaner;

/**
 * A unit of work in flight on a node: it counts for {@code least_outstanding}
 * balancing until released, and its outcome feeds passive health (ejection
 * after {@code health.eject_after_failures} consecutive failures).
 *
 * <p>Release it exactly once with {@link #release(Outcome)}; a second release
 * throws {@link InvalidLeaseException}. {@link #close()} releases with
 * {@link Outcome#NEUTRAL} if the lease is still live and is otherwise a no-op,
 * so a lease fits try-with-resources:
 *
 * <pre>{@code
 * try (Lease lease = cluster.pick()) {
 *     doWork(pools[lease.node()]);
 *     lease.release(Outcome.OK);
 * }   // an exception above releases NEUTRAL
 * }</pre>
 *
 * <p>A lease that becomes unreachable without a release is released
 * {@link Outcome#NEUTRAL} once the garbage collector finds it (a
 * {@link Cleaner}), so a forgotten lease does not count as in flight forever.
 */
public final class Lease implements AutoCloseable {
    private final Cluster cluster;
    private final int node;
    private final RouteKind kind;
    private final End end;
    private final Cleaner.Cleanable cleanable;

    Lease(Cluster cluster, int node, RouteKind kind) {
        this.cluster = cluster;
        this.node = node;
        this.kind = kind;
        this.end = new End(cluster.handle(), node);
        this.cleanable = Cluster.CLEANER.register(this, end);
    }

    /** @return the leased node's id */
    public int node() {
        return node;
    }

    /** @return the leased node's name */
    public String nodeName() {
        return cluster.nodeName(node);
    }

    /** @return how the node was chosen */
    public RouteKind kind() {
        return kind;
    }

    /** @return this lease as a route */
    public Route route() {
        return new Route(node, nodeName(), kind);
    }

    /** @return whether the lease was released */
    public boolean isReleased() {
        return end.isDone();
    }

    /**
     * Releases the lease with an outcome.
     *
     * @param outcome how the work ended
     * @throws InvalidLeaseException if it was already released
     */
    public void release(Outcome outcome) {
        if (!tryRelease(outcome)) {
            throw new InvalidLeaseException("lease on node " + cluster.nodeName(node) + " already released");
        }
    }

    /**
     * Releases the lease if it is still live.
     *
     * @param outcome how the work ended
     * @return true if this call released it, false if it was already released
     */
    public boolean tryRelease(Outcome outcome) {
        if (!end.markDone()) {
            return false;
        }
        try {
            Native.leaseEnd(cluster.handle(), node, outcome.ordinal());
        } finally {
            cleanable.clean(); // unregisters; End.run finds the lease released
        }
        return true;
    }

    /** Releases with {@link Outcome#NEUTRAL} if still live; never throws for a closed cluster. */
    @Override
    public void close() {
        try {
            tryRelease(Outcome.NEUTRAL);
        } catch (ClusterClosedException e) {
            // The cluster and its counters are gone: nothing left to release.
        }
    }

    @Override
    public String toString() {
        return "Lease[node=" + nodeName() + " (" + node + "), kind=" + kind + (isReleased() ? ", released]" : "]");
    }

    /**
     * The exactly-once release, shared by {@link #tryRelease} and the cleaner:
     * it holds the handle and node, never the lease, so the lease can become
     * unreachable.
     */
    private static final class End extends ReleaseOnce implements Runnable {
        private final long handle;
        private final int node;

        End(long handle, int node) {
            this.handle = handle;
            this.node = node;
        }

        @Override
        public void run() {
            if (markDone()) {
                try {
                    Native.leaseEnd(handle, node, Outcome.NEUTRAL.ordinal());
                } catch (RuntimeException e) {
                    // the cluster is closed: its leases went with it
                }
            }
        }
    }
}
