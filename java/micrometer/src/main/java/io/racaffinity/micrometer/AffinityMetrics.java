package io.racaffinity.micrometer;

import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.binder.MeterBinder;
import io.racaffinity.Cluster;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.ReplayCounts;
import io.racaffinity.jdbc.AffinityDataSource;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.function.ToLongFunction;
import javax.sql.DataSource;

/**
 * Micrometer meters for one {@link AffinityDataSource}:
 * <ul>
 *   <li>per node pool, the OpenTelemetry database-client connection metrics
 *       ({@code db.client.connection.count} with {@code db.client.connection.state} =
 *       {@code idle}/{@code used}, {@code .pending_requests}, {@code .max}, {@code .idle.min},
 *       {@code .wait_time}, {@code .use_time}, {@code .create_time}, {@code .timeouts}), tagged
 *       {@code db.client.connection.pool.name}, from HikariCP's own metrics hooks (so node
 *       pools of other classes get none);</li>
 *   <li>per node, the core's affinity counters ({@code racaffinity.node.picks},
 *       {@code .affinity_hits}, {@code .repins}, {@code .strict_refusals}, {@code .failures}),
 *       in-flight work and its state ({@code racaffinity.node.status}: 1 for the current
 *       {@code racaffinity.node.state}, 0 for the others; deprecated and served one release
 *       more, the same as {@code racaffinity.node.state} with {@code racaffinity.node.state.value});</li>
 *   <li>per affinity scope ({@code transaction}, {@code session}, {@code data},
 *       {@code thread}): {@code racaffinity.scope.hits}, {@code .placements}, {@code .repins},
 *       {@code .fallbacks}, {@code .strict_refusals} and {@code racaffinity.scope.live};</li>
 *   <li>with a topology feed ({@code topology.feed}), per cluster: {@code racaffinity.feed.connected}
 *       (1 or 0), {@code racaffinity.feed.revision}, {@code racaffinity.feed.lag} (records not yet
 *       applied) and the counters {@code racaffinity.feed.records.applied} and
 *       {@code racaffinity.feed.records.refused};</li>
 *   <li>with request replay on ({@link AffinityDataSource#setReplay}), per cluster, how its recoveries
 *       ended ({@link ReplayCounts}): the counters {@code racaffinity.replay.replayed},
 *       {@code .committed_already}, {@code .refused} (tagged {@code racaffinity.replay.refusal}),
 *       {@code .outcome_checks} and {@code .outcomes_forced}.</li>
 * </ul>
 * The full list, with units, is in docs/java-ecosystem.md. A Prometheus registry serves the
 * families Python's exporter serves ({@code db_client_connection_count},
 * {@code db_client_connection_wait_time_seconds} as a histogram, ...); for OTLP take
 * {@link AffinityOpenTelemetry}, since Micrometer has no up-down counter. Values are read
 * from the core when the registry asks (no thread of its own).
 *
 * <pre>{@code
 * new AffinityMetrics(dataSource).bindTo(registry);   // Spring: declare it as a MeterBinder bean
 * }</pre>
 *
 * Bind before the node pools are used if you can: HikariCP accepts one metrics tracker
 * per pool, so a pool that already has one (HikariCP's own Micrometer tracker, say) is an
 * error naming it.
 */
public final class AffinityMetrics implements MeterBinder {
    static final String CLUSTER = "racaffinity.cluster";
    static final String NODE = "racaffinity.node";
    static final String SCOPE = "racaffinity.scope";
    /**
     * The node's state, a tag of {@code racaffinity.node.status} (OpenTelemetry's {@code
     * hw.status}/{@code hw.state} pattern). Before, the meter was {@code racaffinity.node.state}
     * tagged {@code racaffinity.node.state.value}: a name that was also a namespace, which
     * OpenTelemetry's naming rules advise against; that pair is served one release more.
     */
    static final String STATE = "racaffinity.node.state";
    /** The deprecated meter's tag. */
    static final String DEPRECATED_STATE = "racaffinity.node.state.value";
    static final List<String> SCOPES = List.of("transaction", "session", "data", "thread");
    static final List<String> SCOPE_COUNTERS = List.of("hits", "placements", "repins", "fallbacks",
            "strict_refusals");

    private final AffinityDataSource dataSource;
    private final Tags extraTags;

    /** @param dataSource the data source (initialised on first use if it is not yet) */
    public AffinityMetrics(AffinityDataSource dataSource) {
        this(dataSource, Tags.empty());
    }

    /**
     * @param dataSource the data source
     * @param extraTags tags added to every meter
     */
    public AffinityMetrics(AffinityDataSource dataSource, Iterable<io.micrometer.core.instrument.Tag> extraTags) {
        this.dataSource = Objects.requireNonNull(dataSource, "dataSource");
        this.extraTags = Tags.of(extraTags);
    }

    @Override
    public void bindTo(MeterRegistry registry) {
        Cluster cluster;
        try {
            cluster = dataSource.getCluster();
        } catch (SQLException e) {
            throw new IllegalStateException("AffinityMetrics: the data source cannot start: " + e.getMessage(), e);
        }
        // Micrometer holds a meter's state object weakly: the gauges ask for a strong reference
        // and the counters' functions capture the snapshot, or it would be collected (NaN).
        Tags clusterTags = extraTags.and(CLUSTER, cluster.name());
        NodeMeters nodeMeters = new NodeMeters(registry, clusterTags);
        Snapshot snapshot = new Snapshot(cluster, nodeMeters::sync);
        nodeMeters.snapshot = snapshot;
        snapshot.namesAtBinding(); // the first read registers the nodes' meters
        for (String node : cluster.nodeNames()) {
            DataSource pool;
            try {
                pool = dataSource.getNodeDataSource(node);
            } catch (SQLException e) {
                throw new IllegalStateException("AffinityMetrics: node " + node + ": " + e.getMessage(), e);
            }
            if (HikariSupport.isHikari(pool)) {
                HikariSupport.bind(pool, registry, extraTags);
            }
        }
        for (String scope : SCOPES) {
            Tags tags = clusterTags.and(SCOPE, scope);
            for (String counter : SCOPE_COUNTERS) {
                FunctionCounter.builder("racaffinity.scope." + counter, snapshot, s -> snapshot.scope(scope, counter))
                        .tags(tags).description(SCOPE_DESCRIPTIONS.get(counter)).register(registry);
            }
            Gauge.builder("racaffinity.scope.live", snapshot, s -> s.scope(scope, "live")).tags(tags).strongReference(true)
                    .description("Affinities of the scope the core holds").register(registry);
        }
        // The feed is configuration: a cluster without one never gains one, so no meters.
        if (cluster.feedStatus().isPresent()) {
            bindFeed(registry, snapshot, clusterTags);
        }
        // Replay too: a data source without it never replays. (Python has no replay counts yet:
        // these are Java's own families, and the comparison of the two exporters runs without replay.)
        if (dataSource.isReplay()) {
            bindReplay(registry, ReplayCounts.of(cluster), clusterTags);
        }
    }

    private static void bindReplay(MeterRegistry registry, ReplayCounts counts, Tags tags) {
        for (ReplayMeter m : ReplayMeter.COUNTERS) {
            FunctionCounter.builder(m.name(), counts, c -> m.value().applyAsLong(c)).tags(tags)
                    .description(m.description()).register(registry);
        }
        for (Refusal r : ReplayMeter.REFUSALS) {
            FunctionCounter.builder(ReplayMeter.REFUSED.name(), counts, c -> c.refused(r))
                    .tags(tags.and(ReplayMeter.REFUSAL, ReplayMeter.refusalName(r)))
                    .description(ReplayMeter.REFUSED.description()).register(registry);
        }
    }

    private static void bindFeed(MeterRegistry registry, Snapshot snapshot, Tags tags) {
        for (FeedMeter m : FeedMeter.LEVELS) {
            Gauge.builder(m.name(), snapshot, s -> s.feed(m.value())).tags(tags).strongReference(true)
                    .description(m.description()).register(registry);
        }
        for (FeedMeter m : FeedMeter.COUNTERS) {
            FunctionCounter.builder(m.name(), snapshot, s -> snapshot.feed(m.value())).tags(tags)
                    .description(m.description()).register(registry);
        }
    }

    private static final Map<String, String> SCOPE_DESCRIPTIONS = Map.of(
            "hits", "Requests routed by an existing affinity of the scope",
            "placements", "Affinities of the scope placed on a node",
            "repins", "Affinities of the scope moved off an unavailable node",
            "fallbacks", "Requests of the scope balanced because their node was unavailable",
            "strict_refusals", "Requests of the scope refused in strict mode");

    /**
     * The per-node meters, kept to the cluster's node set: a node added at runtime (addNode, a topology feed)
     * gets its meters at the first read that sees it, a removed node's meters go. Without this the node list was
     * fixed when bound, and a dashboard never saw a new node or kept a gone one (Python reports every node of
     * each read).
     */
    private static final class NodeMeters {
        private final MeterRegistry registry;
        private final Tags clusterTags;
        private final Map<String, List<Meter>> byNode = new HashMap<>();
        Snapshot snapshot;

        NodeMeters(MeterRegistry registry, Tags clusterTags) {
            this.registry = registry;
            this.clusterTags = clusterTags;
        }

        /** Brought to the latest read's node set, not to the one a (possibly earlier) caller saw. */
        synchronized void sync() {
            List<String> now = snapshot.knownNames();
            for (String node : now) {
                byNode.computeIfAbsent(node, n -> bindNode(registry, snapshot, clusterTags.and(NODE, n), n));
            }
            for (Iterator<Map.Entry<String, List<Meter>>> it = byNode.entrySet().iterator(); it.hasNext(); ) {
                Map.Entry<String, List<Meter>> e = it.next();
                if (!now.contains(e.getKey())) {
                    e.getValue().forEach(registry::remove);
                    it.remove();
                }
            }
        }
    }

    private static List<Meter> bindNode(MeterRegistry registry, Snapshot snapshot, Tags tags, String node) {
        List<Meter> meters = new ArrayList<>();
        meters.add(counter(registry, "racaffinity.node.picks", "Units of work routed to the node", snapshot, tags,
                node, NodeMetrics::picks));
        meters.add(counter(registry, "racaffinity.node.affinity_hits", "Picks of the node by an existing affinity",
                snapshot, tags, node, NodeMetrics::affinityHits));
        meters.add(counter(registry, "racaffinity.node.repins", "Affinities moved to the node off an unavailable one",
                snapshot, tags, node, NodeMetrics::repins));
        meters.add(counter(registry, "racaffinity.node.strict_refusals", "Strict refusals naming the node", snapshot,
                tags, node, NodeMetrics::strictRefusals));
        meters.add(counter(registry, "racaffinity.node.failures",
                "Units of work on the node that ended in a node failure", snapshot, tags, node, NodeMetrics::failures));
        meters.add(Gauge.builder("racaffinity.node.in_flight", snapshot, s -> s.node(node, NodeMetrics::inFlight))
                .tags(tags).strongReference(true)
                .description("Leases on the node not yet released").register(registry));
        for (NodeState state : NodeState.values()) {
            String value = state.name().toLowerCase(Locale.ROOT);
            // NaN once the node is gone (closed data source): 0 for every state would read as
            // a node neither up nor down.
            meters.add(Gauge.builder("racaffinity.node.status", snapshot, s -> {
                        NodeState now = s.state(node);
                        return now == null ? Double.NaN : now == state ? 1 : 0;
                    })
                    .tags(tags.and(STATE, value)).strongReference(true)
                    .description("1 for the node's current state (racaffinity.node.state), 0 for the others")
                    .register(registry));
            meters.add(Gauge.builder("racaffinity.node.state", snapshot, s -> {
                        NodeState now = s.state(node);
                        return now == null ? Double.NaN : now == state ? 1 : 0;
                    })
                    .tags(tags.and(DEPRECATED_STATE, value)).strongReference(true)
                    .description("Deprecated: racaffinity.node.status (tag racaffinity.node.state), the same "
                            + "values; this name goes in the next release")
                    .register(registry));
        }
        return meters;
    }

    private static Meter counter(MeterRegistry registry, String name, String description, Snapshot snapshot,
            Tags tags, String node, ToLongFunction<NodeMetrics> f) {
        return FunctionCounter.builder(name, snapshot, s -> snapshot.node(node, f)).tags(tags)
                .description(description).register(registry);
    }
}
