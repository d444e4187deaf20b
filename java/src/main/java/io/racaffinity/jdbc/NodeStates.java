package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import java.lang.System.Logger;
import java.lang.System.Logger.Level;

/**
 * The one log line of a node state change: Down is WARNING (work moves away from the node or,
 * in strict scopes, fails), Up and a planned drain INFO, each with its cause.
 */
final class NodeStates {
    private NodeStates() {}

    /**
     * Logs that {@code node} went from {@code from} to {@code to}, with the core's cause
     * ({@code event}, {@code heartbeat}, {@code ejected}, {@code admin}) and what the data
     * source saw last.
     *
     * @param owner the data source's log prefix
     * @param seen the last connection failure this data source saw on the node, or null
     */
    static void logTransition(Logger log, String owner, Cluster cluster, int node, NodeState from, NodeState to,
            String seen) {
        try {
            String name = cluster.nodeName(node);
            String cause = to == NodeState.UP ? "back in service" : "cause " + downCause(cluster, node);
            String last = to == NodeState.UP || seen == null ? "" : "; last connection failure: " + seen;
            log.log(to == NodeState.DOWN ? Level.WARNING : Level.INFO,
                    () -> owner + ": node " + name + " " + from + " -> " + to + " (" + cause + last + ")");
        } catch (AffinityException e) {
            // closed or removed meanwhile: nothing to report
        }
    }

    /** Heartbeat's form: the probe that changed the state says why. */
    static void logChange(Logger log, String owner, Cluster cluster, int node, String probe) {
        try {
            NodeState now = cluster.nodeState(node);
            log.log(now == NodeState.DOWN ? Level.WARNING : Level.INFO,
                    () -> owner + ": node " + cluster.nodeName(node) + " is now " + now + " (" + probe + ")");
        } catch (AffinityException e) {
            // closed or removed meanwhile
        }
    }

    private static String downCause(Cluster cluster, int node) {
        for (NodeMetrics m : cluster.nodeMetrics()) {
            if (m.node() == node) {
                return m.downCause();
            }
        }
        return "unknown";
    }
}
