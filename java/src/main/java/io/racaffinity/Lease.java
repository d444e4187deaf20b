package io.racaffinity;

import java.lang.ref.Cleaner;
import java.util.Objects;

/**
 * A unit of work in flight on a node: it counts for {@code least_outstanding}
 * balancing until released, and its outcome feeds passive health (ejection
 * after {@code health.eject_after_failures} consecutive failures).
 *
 * <p>Release it exactly once with {@link #release(Outcome)}; a second release
 * throws {@link InvalidLeaseException}. {@link #close()} releases with
 * {@link Outcome#NEUTRAL} if the lease is still live and is otherwise a no-op,
 * so a lease fits try-with-resources. A lease may be released on another
 * thread than the one that picked it, after a hand-off, but never from two
 * threads at once:
 *
 * <pre>{@code
 * try (Lease lease = cluster.pick()) {
 *     doWork(pools[lease.node()]);
 *     lease.release(Outcome.OK);
 * }   // an exception above releases NEUTRAL
 * }</pre>
 *
 * <p>A lease that crossed into the library and becomes unreachable without a
 * release is released {@link Outcome#NEUTRAL} once the garbage collector finds
 * it (a {@link Cleaner}). A {@link Cluster#pick()} on an {@code Up} node
 * (served from a pinned thread's cache, or picked by the library in one call
 * that also begins the lease) is a <em>host lease</em>, counted in memory the
 * library shares with Java and released without a call; it is not watched by the garbage
 * collector (a cleaner would cost more than the lease), so a forgotten one
 * counts as in flight on its node until the cluster closes, also after its
 * thread has ended: {@link NodeMetrics#inFlight()} (and JMX
 * {@code NodeInFlight}) stays one higher, and {@code least_outstanding}
 * sends that node slightly less work. Bounded: past 64 host leases in flight
 * on one stripe of threads for one node (logged once at WARNING), picks
 * there are leases the collector watches. An {@code AffinityConnection} of a
 * pinned thread holds such a lease (docs/java-datasource.md, "Connections
 * never closed"). Release every lease, as above.
 */
public final class Lease implements AutoCloseable {
    private final Cluster cluster;
    private final int node;
    private final RouteKind kind;
    /** A lease the library counts: its end, run once by a release or the cleaner. Null for a host lease. */
    private final End end;
    private final Cleaner.Cleanable cleanable;
    /** A host lease's word (byte offset in the epoch page) and the epoch read before it began. */
    private final int word;
    private final long epoch;
    /**
     * A host lease's exactly-once flag: a plain field, so that a lease used
     * and released in one method is never allocated at all (escape analysis
     * removes it, an atomic update would pin it to the heap). A second
     * release is still detected; two releases racing on two threads are not.
     */
    private boolean hostReleased;

    Lease(Cluster cluster, int node, RouteKind kind) {
        this.cluster = cluster;
        this.node = node;
        this.kind = kind;
        this.end = new End(cluster.handle(), node);
        this.cleanable = Cluster.CLEANER.register(this, end);
        this.word = -1;
        this.epoch = 0;
    }

    /**
     * A host lease ({@link Cluster#pick()} on a thread whose pinned route is
     * cached): counted in the epoch page's lease word, so neither its begin
     * nor an OK or NEUTRAL release calls into the library. It has no cleaner:
     * registering one costs more than the whole lease.
     */
    Lease(Cluster cluster, int node, RouteKind kind, int word, long epoch) {
        this.cluster = cluster;
        this.node = node;
        this.kind = kind;
        this.end = null;
        this.cleanable = null;
        this.word = word;
        this.epoch = epoch;
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
        return end == null ? hostReleased : end.isDone();
    }

    /**
     * Releases the lease with an outcome.
     *
     * @param outcome how the work ended
     * @throws InvalidLeaseException if it was already released
     */
    public void release(Outcome outcome) {
        if (!tryRelease(outcome)) {
            // nodeLabel: a lease released before its cluster closed is still an invalid lease, not a closed cluster.
            throw new InvalidLeaseException("lease on node " + cluster.nodeLabel(node) + " already released");
        }
    }

    /**
     * Releases the lease if it is still live.
     *
     * @param outcome how the work ended
     * @return true if this call released it, false if it was already released
     */
    public boolean tryRelease(Outcome outcome) {
        Objects.requireNonNull(outcome, "outcome");
        if (end == null) {
            if (hostReleased) {
                return false;
            }
            hostReleased = true;
            cluster.endHostLease(node, word, epoch, outcome);
            return true;
        }
        return releaseTracked(outcome);
    }

    /** A lease the library counts; apart from the host path so that this stays inlinable. */
    private boolean releaseTracked(Outcome outcome) {
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
        return "Lease[node=" + cluster.nodeLabel(node) + " (" + node + "), kind=" + kind + (isReleased() ? ", released]" : "]");
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
