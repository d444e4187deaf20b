package io.racaffinity.micrometer;

import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.metrics.MeterBuilder;
import io.opentelemetry.api.metrics.MeterProvider;
import io.opentelemetry.api.metrics.ObservableLongMeasurement;
import io.racaffinity.Cluster;
import io.racaffinity.Continuity.Refusal;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.ReplayCounts;
import io.racaffinity.jdbc.AffinityDataSource;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.function.Consumer;
import java.util.function.ToLongFunction;
import javax.sql.DataSource;

/**
 * The metrics of one {@link AffinityDataSource} through the OpenTelemetry API, as
 * OpenTelemetry's semantic conventions define them: the same names, instruments, units and
 * attributes as Python's {@code racaffinity.otel}, so that one dashboard reads both
 * languages whether they export OTLP or are scraped by Prometheus. Use it rather than
 * {@link AffinityMetrics} when the metrics leave by OTLP: Micrometer has no up-down counter
 * (its OTLP registry sends {@code db.client.connection.count} as a gauge) and its OTLP
 * registry sends timers in milliseconds by default.
 *
 * <ul>
 *   <li>per HikariCP node pool ({@code db.client.connection.pool.name} = {@code
 *       <cluster>-<node>}): {@code db.client.connection.count} ({@code
 *       db.client.connection.state} = {@code idle}/{@code used}), {@code .idle.min}, {@code
 *       .max} (up-down counters, {@code {connection}}), {@code .pending_requests} ({@code
 *       {request}}), {@code .timeouts} (counter, {@code {timeout}}), {@code .create_time},
 *       {@code .wait_time}, {@code .use_time} (histograms, {@code s});
 *   <li>per node and per scope, the core's counters and levels, named as in {@link
 *       AffinityMetrics};
 *   <li>with a topology feed, per cluster: {@code racaffinity.feed.connected}, {@code .revision},
 *       {@code .lag} (up-down counters) and {@code racaffinity.feed.records.applied}, {@code
 *       .records.refused} (counters);
 *   <li>with request replay on, per cluster, the replay counters named as in {@link AffinityMetrics}.
 * </ul>
 *
 * <pre>{@code
 * AffinityOpenTelemetry metrics = AffinityOpenTelemetry.install(dataSource, openTelemetry);
 * ...
 * metrics.close();   // before the data source's close
 * }</pre>
 *
 * Needs {@code io.opentelemetry:opentelemetry-api} (1.38 or newer) on the class path; the
 * application brings its SDK. As with {@link AffinityMetrics}, HikariCP takes one metrics
 * tracker per pool: install before the pools are used, and bind one of the two binders.
 */
public final class AffinityOpenTelemetry implements AutoCloseable {
    static final AttributeKey<String> POOL = AttributeKey.stringKey("db.client.connection.pool.name");
    static final AttributeKey<String> STATE = AttributeKey.stringKey("db.client.connection.state");
    private static final AttributeKey<String> CLUSTER = AttributeKey.stringKey(AffinityMetrics.CLUSTER);
    private static final AttributeKey<String> NODE = AttributeKey.stringKey(AffinityMetrics.NODE);
    private static final AttributeKey<String> SCOPE = AttributeKey.stringKey(AffinityMetrics.SCOPE);
    private static final AttributeKey<String> NODE_STATE = AttributeKey.stringKey(AffinityMetrics.STATE);
    private static final AttributeKey<String> DEPRECATED_NODE_STATE =
            AttributeKey.stringKey(AffinityMetrics.DEPRECATED_STATE);
    private static final AttributeKey<String> REFUSAL = AttributeKey.stringKey(ReplayMeter.REFUSAL);

    private final List<AutoCloseable> instruments = new ArrayList<>();
    private final HikariOpenTelemetry pools;

    private AffinityOpenTelemetry(Meter meter, Cluster cluster, boolean replay) {
        this.pools = new HikariOpenTelemetry(meter);
        Snapshot snapshot = new Snapshot(cluster);
        String name = cluster.name();
        // Each callback reports the nodes of the snapshot's latest read, not a list fixed here: a node added at
        // runtime (addNode, a topology feed) is reported from the next collection, a removed one no more.
        node(meter, "picks", "Units of work routed to the node", snapshot, name, NodeMetrics::picks);
        node(meter, "affinity_hits", "Picks of the node by an existing affinity", snapshot, name,
                NodeMetrics::affinityHits);
        node(meter, "repins", "Affinities moved to the node off an unavailable one", snapshot, name,
                NodeMetrics::repins);
        node(meter, "strict_refusals", "Strict refusals naming the node", snapshot, name,
                NodeMetrics::strictRefusals);
        node(meter, "failures", "Units of work on the node that ended in a node failure", snapshot, name,
                NodeMetrics::failures);
        instruments.add(meter.upDownCounterBuilder("racaffinity.node.in_flight")
                .setDescription("Leases on the node not yet released").buildWithCallback(m -> {
                    for (String n : snapshot.names()) {
                        record(m, snapshot.node(n, NodeMetrics::inFlight), nodeAttributes(name, n));
                    }
                }));
        instruments.add(meter.upDownCounterBuilder("racaffinity.node.status")
                .setDescription("1 for the node's current state (racaffinity.node.state), 0 for the others")
                .buildWithCallback(states(snapshot, name, NODE_STATE)));
        instruments.add(meter.upDownCounterBuilder("racaffinity.node.state")
                .setDescription("Deprecated: racaffinity.node.status (attribute racaffinity.node.state), the "
                        + "same points; this name goes in the next release")
                .buildWithCallback(states(snapshot, name, DEPRECATED_NODE_STATE)));
        for (String counter : AffinityMetrics.SCOPE_COUNTERS) {
            instruments.add(meter.counterBuilder("racaffinity.scope." + counter)
                    .setDescription(SCOPE_DESCRIPTIONS.get(counter))
                    .buildWithCallback(scopes(snapshot, name, counter)));
        }
        instruments.add(meter.upDownCounterBuilder("racaffinity.scope.live")
                .setDescription("Affinities of the scope the core holds").buildWithCallback(scopes(snapshot, name, "live")));
        // The feed is configuration: a cluster without one never gains one, so no instruments.
        if (cluster.feedStatus().isPresent()) {
            Attributes attributes = Attributes.of(CLUSTER, name);
            for (FeedMeter f : FeedMeter.LEVELS) {
                instruments.add(meter.upDownCounterBuilder(f.name()).setDescription(f.description())
                        .buildWithCallback(m -> record(m, snapshot.feed(f.value()), attributes)));
            }
            for (FeedMeter f : FeedMeter.COUNTERS) {
                instruments.add(meter.counterBuilder(f.name()).setDescription(f.description())
                        .buildWithCallback(m -> record(m, snapshot.feed(f.value()), attributes)));
            }
        }
        // As in AffinityMetrics: only a data source that replays has replay instruments.
        if (replay) {
            ReplayCounts counts = ReplayCounts.of(cluster);
            Attributes attributes = Attributes.of(CLUSTER, name);
            for (ReplayMeter r : ReplayMeter.COUNTERS) {
                instruments.add(meter.counterBuilder(r.name()).setDescription(r.description())
                        .buildWithCallback(m -> m.record(r.value().applyAsLong(counts), attributes)));
            }
            instruments.add(meter.counterBuilder(ReplayMeter.REFUSED.name())
                    .setDescription(ReplayMeter.REFUSED.description()).buildWithCallback(m -> {
                        for (Refusal why : ReplayMeter.REFUSALS) {
                            m.record(counts.refused(why), attributes.toBuilder()
                                    .put(REFUSAL, ReplayMeter.refusalName(why)).build());
                        }
                    }));
        }
    }

    /**
     * Registers the metrics of {@code dataSource} (initialised here if it is not yet) with
     * the meter provider of {@code openTelemetry}.
     *
     * @return the registration; {@link #close()} ends it
     * @throws IllegalStateException if the data source cannot start, or a node pool already
     *     has a HikariCP metrics tracker
     */
    public static AffinityOpenTelemetry install(AffinityDataSource dataSource, OpenTelemetry openTelemetry) {
        return install(dataSource, openTelemetry.getMeterProvider());
    }

    /** As {@link #install(AffinityDataSource, OpenTelemetry)}, with a meter provider. */
    public static AffinityOpenTelemetry install(AffinityDataSource dataSource, MeterProvider meterProvider) {
        Objects.requireNonNull(dataSource, "dataSource");
        Objects.requireNonNull(meterProvider, "meterProvider");
        Cluster cluster;
        try {
            cluster = dataSource.getCluster();
        } catch (SQLException e) {
            throw new IllegalStateException("AffinityOpenTelemetry: the data source cannot start: " + e.getMessage(), e);
        }
        MeterBuilder b = meterProvider.meterBuilder("racaffinity");
        String version = AffinityOpenTelemetry.class.getPackage().getImplementationVersion();
        if (version != null) {
            b.setInstrumentationVersion(version);
        }
        AffinityOpenTelemetry t = new AffinityOpenTelemetry(b.build(), cluster, dataSource.isReplay());
        try {
            for (String node : cluster.nodeNames()) {
                DataSource pool = dataSource.getNodeDataSource(node);
                if (HikariOpenTelemetry.isHikari(pool)) {
                    t.pools.bind(pool);
                }
            }
        } catch (SQLException | RuntimeException e) {
            t.close();
            throw e instanceof RuntimeException ? (RuntimeException) e
                    : new IllegalStateException("AffinityOpenTelemetry: " + e.getMessage(), e);
        }
        return t;
    }

    /**
     * Removes the observable instruments; the HikariCP trackers (a pool keeps its tracker)
     * record nothing more. Idempotent.
     */
    @Override
    public synchronized void close() {
        pools.close();
        for (AutoCloseable c : instruments) {
            try {
                c.close();
            } catch (Exception e) {
                // an SDK's close of an instrument does not fail; nothing to undo
            }
        }
        instruments.clear();
    }

    private static final Map<String, String> SCOPE_DESCRIPTIONS = Map.of(
            "hits", "Requests routed by an existing affinity of the scope",
            "placements", "Affinities of the scope placed on a node",
            "repins", "Affinities of the scope moved off an unavailable node",
            "fallbacks", "Requests of the scope balanced because their node was unavailable",
            "strict_refusals", "Requests of the scope refused in strict mode");

    private void node(Meter meter, String counter, String description, Snapshot snapshot, String cluster,
            ToLongFunction<NodeMetrics> f) {
        instruments.add(meter.counterBuilder("racaffinity.node." + counter).setDescription(description)
                .buildWithCallback(m -> {
                    for (String n : snapshot.names()) {
                        record(m, snapshot.node(n, f), nodeAttributes(cluster, n));
                    }
                }));
    }

    private static Consumer<ObservableLongMeasurement> scopes(Snapshot snapshot, String cluster, String field) {
        return m -> {
            for (String scope : AffinityMetrics.SCOPES) {
                record(m, snapshot.scope(scope, field), Attributes.of(CLUSTER, cluster, SCOPE, scope));
            }
        };
    }

    /** 1 for each node's current state, 0 for the others, the state under {@code key}. */
    private static Consumer<ObservableLongMeasurement> states(Snapshot snapshot, String cluster,
            AttributeKey<String> key) {
        return m -> {
            for (String n : snapshot.names()) {
                NodeState now = snapshot.state(n);
                if (now == null) {
                    continue;
                }
                for (NodeState s : NodeState.values()) {
                    m.record(s == now ? 1 : 0, nodeAttributes(cluster, n).toBuilder()
                            .put(key, s.name().toLowerCase(Locale.ROOT)).build());
                }
            }
        };
    }

    private static Attributes nodeAttributes(String cluster, String node) {
        return Attributes.of(CLUSTER, cluster, NODE, node);
    }

    /** A closed data source reads NaN: no point rather than a made-up one. */
    private static void record(ObservableLongMeasurement m, double v, Attributes a) {
        if (!Double.isNaN(v)) {
            m.record((long) v, a);
        }
    }
}
