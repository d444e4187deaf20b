package io.racaffinity.jdbc;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import java.lang.System.Logger;
import java.lang.System.Logger.Level;

/** The one log line of a node state change, whoever saw it (heartbeat, failed connection, pool upkeep). */
final class NodeStates {
    private NodeStates() {}

    /**
     * Logs that {@code node} changed state: Down is WARNING (work moves away from it or, in
     * strict scopes, fails), Up and a planned drain INFO.
     *
     * @param owner the data source's log prefix
     * @param cause what reported the change
     */
    static void logChange(Logger log, String owner, Cluster cluster, int node, String cause) {
        try {
            NodeState now = cluster.nodeState(node);
            log.log(now == NodeState.DOWN ? Level.WARNING : Level.INFO,
                    () -> owner + ": node " + cluster.nodeName(node) + " is now " + now + " (" + cause + ")");
        } catch (AffinityException e) {
            // closed or removed meanwhile: nothing to report
        }
    }
}
