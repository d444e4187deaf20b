package io.racaffinity;

import java.util.OptionalInt;

/**
 * A pin context that follows one scope's rules: UCP's connection affinity
 * context, underneath {@code io.racaffinity.jdbc.ConnectionAffinityCallback}.
 * Unlike a {@link Pin}, it belongs to no thread: the application (or its
 * callback) holds it, and any thread may route with it.
 *
 * <ul>
 *   <li>{@link Scope#TRANSACTION} obeys {@code transaction.strict} (UCP's
 *       {@code UseStrictXAAffinity});</li>
 *   <li>{@link Scope#SESSION} obeys {@code session.strict}
 *       ({@code UseStrictWebSessionAffinity}), prefers instances advising
 *       affinity, and is released by an advisory with {@code aff=FALSE};</li>
 *   <li>{@link Scope#THREAD} is the thread scope's rules.</li>
 * </ul>
 *
 * <p>{@link #pin()} places (or deepens) the pin, {@link #pick()} routes one
 * unit of work with it. Every decision is the core's ({@code Cluster::pin_context_for}).
 * {@link #close()} releases the pin; so does the garbage collector once the
 * context is unreachable.
 */
public final class AffinityContext implements AutoCloseable {
    private final Cluster cluster;
    private final long key;
    private final Scope scope;

    AffinityContext(Cluster cluster, long key, Scope scope) {
        this.cluster = cluster;
        this.key = key;
        this.scope = scope;
        // Not cleaned by close(): a context pinned again after its close is released when unreachable too.
        cluster.releaseWhenUnreachable(this, key);
    }

    /** @return the scope whose rules this context follows */
    public Scope scope() {
        return scope;
    }

    /** @return the cluster it routes in */
    public Cluster cluster() {
        return cluster;
    }

    /**
     * Pins the context (a new pin by the scope's placement, or one more level
     * of the existing pin).
     *
     * @return the pinned route ({@code PLACED}, {@code AFFINITY}, or {@code REPINNED} after a soft move)
     * @throws StrictAffinityException if the scope is strict and its node is unavailable
     */
    public Route pin() {
        return cluster.route(Native.contextPinFor(cluster.handle(), key, scope.ordinal()));
    }

    /**
     * Routes one unit of work: the pin if pinned (moved in soft mode when its
     * node is unavailable), else load balancing; leases the node.
     *
     * @return the lease; release it with an outcome
     * @throws StrictAffinityException if the scope is strict and its node is unavailable
     */
    public Lease pick() {
        long r = Native.contextPick(cluster.handle(), key);
        return new Lease(cluster, Native.node(r), Native.kind(r));
    }

    /**
     * {@link Cluster#repickFor} for this context: after {@code failedNode} could
     * not give a connection, the pin moves to the node the core names next
     * (soft scopes only) and that node is leased.
     *
     * @param failedNode the node that failed (its lease released {@code FAILED} first)
     * @return the lease, or null for no retry (strict scope, or no other usable node)
     */
    public Lease repick(int failedNode) {
        return cluster.repick(null, null, key, failedNode);
    }

    /** @return the pinned node, or empty when unpinned (never pinned, released, or withdrawn by {@code aff=FALSE}) */
    public OptionalInt pinnedNode() {
        int n = Native.contextPinnedNode(cluster.handle(), key);
        return n < 0 ? OptionalInt.empty() : OptionalInt.of(n);
    }

    /**
     * Releases the pin at every level. Idempotent; quiet if the cluster is closed. A later
     * {@link #pin()} pins the context again, and that pin too is released by a close or once the
     * context is unreachable.
     */
    @Override
    public void close() {
        try {
            Native.contextRelease(cluster.handle(), key);
        } catch (ClusterClosedException e) {
            // The cluster's pins went with it.
        }
    }

    @Override
    public String toString() {
        return "AffinityContext[" + scope + ", key=" + key + "]";
    }
}
