package io.racaffinity.micrometer;

import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.FeedStatus;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.ToLongFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The core's metrics, read once per scrape rather than once per meter: a registry reads
 * dozens of meters in a row, and each read of the core copies every node's counters. Each
 * read also has the cluster's node set, which changes at runtime (an added or removed node,
 * a topology feed): the binders report the nodes of the latest read, as Python's exporter does.
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
    /** Told when a read finds another node set than the one before (called outside this object's lock). */
    private final Runnable onNodeSet;
    private long readAt;
    private Map<String, NodeMetrics> nodes = Map.of();
    /** The node names of the last read that succeeded, in node order; kept once the cluster is closed. */
    private List<String> names;
    // Doubles, as every meter reads them: the core's counters are u64 and may pass Long.MAX_VALUE.
    private Map<String, Double> scopes = Map.of();
    private Optional<FeedStatus> feed = Optional.empty();

    Snapshot(Cluster cluster) {
        this(cluster, () -> { });
    }

    Snapshot(Cluster cluster, Runnable onNodeSet) {
        this.cluster = cluster;
        this.onNodeSet = onNodeSet;
    }

    /**
     * Reads the core if the last read is too old. A listener registers meters with a registry, which takes the
     * registry's lock: never under this one, which every meter's read takes.
     */
    private void refresh() {
        boolean changed;
        synchronized (this) {
            changed = read();
        }
        if (changed) {
            onNodeSet.run();
        }
    }

    /** @return the node set changed */
    private boolean read() {
        long now = System.nanoTime();
        if (readAt != 0 && now - readAt < MAX_AGE_NANOS) {
            return false;
        }
        readAt = now;
        try {
            Map<String, NodeMetrics> byName = new HashMap<>();
            List<NodeMetrics> list = cluster.nodeMetrics();
            List<String> order = new ArrayList<>(list.size());
            for (NodeMetrics m : list) {
                byName.put(m.name(), m);
                order.add(m.name());
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
            boolean changed = !order.equals(names);
            names = List.copyOf(order);
            return changed;
        } catch (ClusterClosedException e) {
            // The data source was closed: its meters read NaN from now on (its nodes are not "removed").
            nodes = Map.of();
            scopes = Map.of();
            feed = Optional.empty();
            return false;
        }
    }

    /** The nodes of the latest read (reading the core if it is old), in node order. */
    List<String> names() {
        refresh();
        return knownNames();
    }

    /**
     * The node set as of now, for a binder registering meters: the read counts as no scrape, so the first
     * scrape after it reads the core again however soon it comes (it would otherwise show the counts of the
     * moment the binder was bound for up to 100 ms).
     */
    List<String> namesAtBinding() {
        List<String> names = names();
        synchronized (this) {
            readAt = 0;
        }
        return names;
    }

    /** The nodes of the latest read, without reading the core (empty before the first read). */
    synchronized List<String> knownNames() {
        return names == null ? List.of() : names;
    }

    double node(String node, ToLongFunction<NodeMetrics> f) {
        refresh();
        synchronized (this) {
            NodeMetrics m = nodes.get(node);
            return m == null ? Double.NaN : f.applyAsLong(m);
        }
    }

    NodeState state(String node) {
        refresh();
        synchronized (this) {
            NodeMetrics m = nodes.get(node);
            return m == null ? null : m.state();
        }
    }

    double scope(String scope, String field) {
        refresh();
        synchronized (this) {
            Double v = scopes.get(scope + "." + field);
            return v == null ? Double.NaN : v;
        }
    }

    /** A field of the topology feed's status; NaN without a feed or once the cluster is closed. */
    double feed(ToLongFunction<FeedStatus> f) {
        refresh();
        synchronized (this) {
            return feed.map(st -> (double) f.applyAsLong(st)).orElse(Double.NaN);
        }
    }
}
