package io.racaffinity.jmx;

import java.util.Map;

/**
 * JMX view of one cluster, registered as {@code io.racaffinity:type=Cluster,name=<name>}
 * ({@code name} is the config's {@code name}). The strict switches use UCP's
 * names (seed 002) and are writable at runtime.
 */
public interface ClusterMXBean {
    /** @return the cluster name */
    String getName();

    /** @return live node names in id order */
    String[] getNodeNames();

    /** @return node name → {@code UP}, {@code DRAINING} or {@code DOWN} */
    Map<String, String> getNodeStates();

    /** @return node name → why it is down or draining ({@code none}, {@code admin}, {@code event}, ...) */
    Map<String, String> getNodeDownCauses();

    /** @return node name → routing decisions that returned it */
    Map<String, Long> getNodePicks();

    /** @return node name → leases in flight */
    Map<String, Long> getNodeInFlight();

    /** @return node name → node-level failures reported */
    Map<String, Long> getNodeFailures();

    /** @return node name → global transactions that spanned from this node to another (soft XA affinity) */
    Map<String, Long> getNodeTxSpans();

    /** @return node name → missed heartbeats */
    Map<String, Long> getNodeProbeMisses();

    /** @return picks over all nodes */
    long getTotalPicks();

    /** @return the metrics snapshot as JSON */
    String getMetricsJson();

    /** @return the metrics snapshot in the Prometheus text format */
    String getMetricsPrometheus();

    /** @return the {@code topology.feed} URL; null when the cluster has no feed (the other Feed attributes are then false or 0) */
    String getFeedUrl();

    /** @return a watch on the topology feed is open and answering */
    boolean isFeedConnected();

    /** @return every feed record up to this etcd revision is applied */
    long getFeedRevision();

    /** @return feed records written after {@link #getFeedRevision()}, at the last check */
    long getFeedLag();

    /** @return feed records that changed or confirmed this cluster's view */
    long getFeedRecordsApplied();

    /** @return feed records refused (malformed, unknown node): nothing changed */
    long getFeedRecordsRefused();

    /** @return feed watches re-opened after a failure */
    long getFeedReconnects();

    /** @return the last failure to reach etcd while the feed is not connected; null if none */
    String getFeedLastError();

    /** @return why the last refused feed record was refused; null if none */
    String getFeedLastRefused();

    /**
     * @return recoveries of request replay that a replay ended: the request went on, on another node
     *     ({@code AffinityDataSource} with {@code replay=true}; 0 without)
     */
    long getReplays();

    /** @return recoveries that found the COMMIT in flight committed: the request succeeded, not replayed */
    long getReplayCommittedAlready();

    /**
     * @return refusal ({@code not_replayable}, {@code replayed_already}, {@code outcome_unknown},
     *     {@code no_node}, {@code results_differ}, {@code not_recoverable}) → recoveries that ended in
     *     the original error with it
     */
    Map<String, Long> getReplayRefusals();

    /** @return outcome checks run ({@code pg_xact_status} of a COMMIT in flight asked of a node) */
    long getReplayOutcomeChecks();

    /** @return outcomes forced (the old transaction's backend ended through a node before a check) */
    long getReplayOutcomesForced();

    /** @return strict XA (transaction) affinity: refuse instead of re-placing */
    boolean isUseStrictXAAffinity();

    /** @param strict strict XA (transaction) affinity */
    void setUseStrictXAAffinity(boolean strict);

    /** @return strict web-session affinity */
    boolean isUseStrictWebSessionAffinity();

    /** @param strict strict web-session affinity */
    void setUseStrictWebSessionAffinity(boolean strict);

    /** @return strict thread pins */
    boolean isUseStrictThreadAffinity();

    /** @param strict strict thread pins */
    void setUseStrictThreadAffinity(boolean strict);

    /** @return strict data affinity (no fallback to load balancing) */
    boolean isUseStrictDataAffinity();

    /** @param strict strict data affinity */
    void setUseStrictDataAffinity(boolean strict);

    /**
     * Marks a node down (cause {@code admin}: only {@link #markUp} lifts it). With a topology
     * feed the change is written through etcd to every subscribed process; when etcd does not
     * take it, {@link IllegalStateException} and nothing changes (as for {@link #markUp} and
     * {@link #drain}).
     *
     * @param node node name
     */
    void markDown(String node);

    /**
     * Marks a node up.
     *
     * @param node node name
     */
    void markUp(String node);

    /**
     * Drains a node: no new affinities; existing ones run to completion.
     *
     * @param node node name
     */
    void drain(String node);

    /**
     * Applies one FAN event or RLB advisory line.
     *
     * @param line the event line
     * @return the number of node state changes
     */
    int applyEvent(String line);
}
