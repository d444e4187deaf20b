package io.racaffinity;

import java.util.concurrent.atomic.AtomicLongArray;

/**
 * A thread pin scope (seed 000's connection factory): while it is open, every
 * {@link Cluster#pick()} and {@link Cluster#route()} of the same Java thread
 * goes to the pinned node (re-pinned if it becomes unavailable in soft mode;
 * {@link StrictAffinityException} in strict mode). Pins nest; closing releases
 * one level. Pins belong to the Java {@link Thread} (platform or virtual), not
 * to the carrier OS thread.
 *
 * <pre>{@code
 * try (Pin pin = cluster.pin()) {
 *     ... every pick on this thread returns pin.node() ...
 * }
 * }</pre>
 */
public final class Pin extends ReleaseOnce implements AutoCloseable {
    private final Cluster cluster;
    private final AtomicLongArray context;
    private final int node;
    private final RouteKind kind;

    Pin(Cluster cluster, AtomicLongArray context, long packed) {
        this.cluster = cluster;
        this.context = context;
        this.node = Native.node(packed);
        this.kind = Native.kind(packed);
    }

    /** @return the pinned node's id when the pin was taken */
    public int node() {
        return node;
    }

    /** @return the pinned node's name when the pin was taken */
    public String nodeName() {
        return cluster.nodeName(node);
    }

    /** @return how the pin was obtained ({@code PLACED} for a new pin, {@code AFFINITY} when nested) */
    public RouteKind kind() {
        return kind;
    }

    /** Releases one level of the pin. Idempotent; quiet if the cluster is closed. */
    @Override
    public void close() {
        if (!markDone()) {
            return;
        }
        try {
            Native.contextUnpin(cluster.handle(), context.getPlain(ThreadContexts.KEY));
            ThreadContexts.pinChanged(context);
        } catch (ClusterClosedException e) {
            // The cluster's pins went with it.
        }
    }

    @Override
    public String toString() {
        return "Pin[node=" + cluster.nodeLabel(node) + " (" + node + "), kind=" + kind + "]";
    }
}
