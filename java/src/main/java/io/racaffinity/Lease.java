package io.racaffinity;

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
 */
public final class Lease extends ReleaseOnce implements AutoCloseable {
    private final Cluster cluster;
    private final int node;
    private final RouteKind kind;

    Lease(Cluster cluster, int node, RouteKind kind) {
        this.cluster = cluster;
        this.node = node;
        this.kind = kind;
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
        return isDone();
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
        if (!markDone()) {
            return false;
        }
        Native.leaseEnd(cluster.handle(), node, outcome.ordinal());
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
}
