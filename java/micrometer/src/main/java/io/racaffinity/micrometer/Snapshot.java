package io.racaffinity.micrometer;

import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.FeedStatus;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.ToLongFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The core's metrics, read once per scrape rather than once per meter: a registry reads
 * dozens of meters in a row, and each read of the core copies every node's counters.
 */
final class Snapshot {
    private static final long MAX_AGE_NANOS = 100_000_000L;
    // The core's JSON (metrics.rs): "<scope>":{"strict":..,"live":..,"hits":..,...} in a fixed order.
    private static final Pattern SCOPE = Pattern.compile(
            "\"(\\w+)\":\\{\"strict\":(?:true|false),\"live\":(\\d+),\"hits\":(\\d+),\"placements\":(\\d+),"
                    + "\"repins\":(\\d+),\"fallbacks\":(\\d+),\"panics\":(\\d+),\"strict_refusals\":(\\d+)\\}");
    private static final String[] SCOPE_FIELDS = {"live", "hits", "placements", "repins", "fallbacks", "panics",
            "strict_refusals"};

    private final Cluster cluster;
    private long readAt;
    private Map<String, NodeMetrics> nodes = Map.of();
    // Doubles, as every meter reads them: the core's counters are u64 and may pass Long.MAX_VALUE.
    private Map<String, Double> scopes = Map.of();
    private Optional<FeedStatus> feed = Optional.empty();

    Snapshot(Cluster cluster) {
        this.cluster = cluster;
    }

    private synchronized void refresh() {
        long now = System.nanoTime();
        if (readAt != 0 && now - readAt < MAX_AGE_NANOS) {
            return;
        }
        readAt = now;
        try {
            Map<String, NodeMetrics> byName = new HashMap<>();
            List<NodeMetrics> list = cluster.nodeMetrics();
            for (NodeMetrics m : list) {
                byName.put(m.name(), m);
            }
            Map<String, Double> s = new HashMap<>();
            Matcher m = SCOPE.matcher(cluster.metricsJson());
            while (m.find()) {
                for (int i = 0; i < SCOPE_FIELDS.length; i++) {
                    s.put(m.group(1) + "." + SCOPE_FIELDS[i], Double.parseDouble(m.group(i + 2)));
                }
            }
            nodes = byName;
            scopes = s;
            feed = cluster.feedStatus();
        } catch (ClusterClosedException e) {
            // The data source was closed: its meters read NaN from now on.
            nodes = Map.of();
            scopes = Map.of();
            feed = Optional.empty();
        }
    }

    synchronized double node(String node, ToLongFunction<NodeMetrics> f) {
        refresh();
        NodeMetrics m = nodes.get(node);
        return m == null ? Double.NaN : f.applyAsLong(m);
    }

    synchronized NodeState state(String node) {
        refresh();
        NodeMetrics m = nodes.get(node);
        return m == null ? null : m.state();
    }

    synchronized double scope(String scope, String field) {
        refresh();
        Double v = scopes.get(scope + "." + field);
        return v == null ? Double.NaN : v;
    }

    /** A field of the topology feed's status; NaN without a feed or once the cluster is closed. */
    synchronized double feed(ToLongFunction<FeedStatus> f) {
        refresh();
        return feed.map(st -> (double) f.applyAsLong(st)).orElse(Double.NaN);
    }
}
