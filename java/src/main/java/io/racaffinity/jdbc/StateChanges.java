package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.NodeMetrics;
import java.util.Arrays;
import java.util.List;

/**
 * Node state changes that a poller of node states missed: a node that went Down (or Draining)
 * and Up again between two of its reads (the operator's {@code setNodeState}, an event applied
 * to the cluster, the topology feed: nothing that pokes the pool upkeep) shows Up to both, and
 * only the core's per-node {@link NodeMetrics#stateChanges()} count moved. Read after the node
 * states a round acts on: a change in between is then seen by the next round's states, never
 * taken for a missed one. Python's {@code racaffinity._state_changes} is the same rule.
 */
final class StateChanges {
    private final Cluster cluster;
    /** The counts as last read, by node id; -1 for a node not read yet. */
    private long[] counts = new long[0];
    private long epoch;
    private boolean read;

    /** Reads the counts once, with the states the pools opened under. */
    StateChanges(Cluster cluster) {
        this.cluster = cluster;
        moved();
    }

    /**
     * The nodes whose count moved since the last read. The counts are read only when the
     * cluster's routing epoch moved (every state change moves it); the epoch is read first, so a
     * change during the read moves it again for the next one.
     *
     * @return node ids, empty when none moved
     */
    int[] moved() {
        long e = cluster.routingEpoch();
        if (read && e == epoch) {
            return new int[0];
        }
        List<NodeMetrics> nodes;
        try {
            nodes = cluster.nodeMetrics();
        } catch (ClusterClosedException ex) {
            throw ex;
        } catch (AffinityException ex) {
            // A node removed as the snapshot was taken: the next round reads again.
            read = false;
            return new int[0];
        }
        epoch = e;
        boolean first = !read;
        read = true;
        long[] last = counts;
        int size = 0;
        for (NodeMetrics m : nodes) {
            size = Math.max(size, m.node() + 1);
        }
        long[] now = new long[size];
        Arrays.fill(now, -1);
        int[] moved = new int[nodes.size()];
        int n = 0;
        for (NodeMetrics m : nodes) {
            now[m.node()] = m.stateChanges();
            if (!first && m.node() < last.length && last[m.node()] >= 0 && last[m.node()] != m.stateChanges()) {
                moved[n++] = m.node();
            }
        }
        counts = now;
        return Arrays.copyOf(moved, n);
    }
}
