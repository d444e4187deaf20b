package io.racaffinity.simplefan;

import io.racaffinity.Cluster;
import io.racaffinity.FeedUnavailableException;
import io.racaffinity.jdbc.AffinityDataSource;
import java.lang.System.Logger.Level;
import java.sql.SQLException;
import java.text.SimpleDateFormat;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.TimeZone;
import oracle.simplefan.FanEvent;
import oracle.simplefan.FanManager;
import oracle.simplefan.FanSubscription;
import oracle.simplefan.FanUpEventListener;
import oracle.simplefan.LoadAdvisoryEvent;
import oracle.simplefan.NodeDownEvent;
import oracle.simplefan.NodeUpEvent;
import oracle.simplefan.ServiceDownEvent;
import oracle.simplefan.ServiceUpEvent;

/**
 * Feeds the events of Oracle's own FAN client, simplefan, into racaffinity: each event is
 * written as the FAN/RLB text line the core parses ({@link AffinityDataSource#applyEvent}),
 * so the routing decisions stay in the core.
 *
 * <ul>
 *   <li>{@link ServiceDownEvent} of one member: {@code SERVICEMEMBER ... status=down} with
 *       its reason ({@code USER}: the core drains the node, for {@code drain_timeout=} seconds
 *       when the event gives one; else the node is down); of the whole service
 *       ({@code COMPOSITE}): {@code SERVICE ... status=down};</li>
 *   <li>{@link ServiceUpEvent}: the same with {@code status=up};</li>
 *   <li>{@link NodeDownEvent} / {@link NodeUpEvent}: {@code NODE host=...} (the core matches
 *       the host of each node's {@code node.<N>.address});</li>
 *   <li>{@link LoadAdvisoryEvent}: simplefan delivers one instance per event, while the
 *       core's advisory lists every instance offering the service (one it does not name gets
 *       no share); the adapter keeps the latest advice of each instance of a service and
 *       sends them all, with each one's percent and flag.</li>
 * </ul>
 * An event the core refuses (a foreign database or service, an unknown instance) is logged
 * at WARNING and dropped: it must not reach simplefan's dispatch thread.
 *
 * <p><b>ONS relay</b> ({@code relayToFeed}, {@link #relayToFeed(Cluster)}): with a topology
 * feed ({@code topology.feed}), the adapter publishes each line into the feed
 * ({@link Cluster#publishEvent}) instead of applying it: the record is applied here at the
 * revision etcd gave it, and every subscribed process of the fleet (C, Python, Java without
 * simplefan) applies the same record. When etcd does not take the write the line is applied
 * in this process only (logged at WARNING): an event Oracle sent is not dropped because
 * etcd is away, while the fleet's other processes miss it until Oracle's next event for the
 * resource. Run one relay per ONS subscription: the feed keeps the latest event per resource,
 * and two relays' copies of one event would interleave with later events.
 *
 * <pre>{@code
 * Properties ons = new Properties();
 * ons.setProperty("onsNodes", "racnode1:6200,racnode2:6200");
 * Properties sub = new Properties();
 * sub.setProperty("serviceName", "MYSERVICE");
 * FanAdapter fan = FanAdapter.subscribe(dataSource, ons, sub);   // close() it with the data source
 * }</pre>
 */
public final class FanAdapter implements FanUpEventListener, AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.racaffinity.simplefan");

    /** Where the lines go: {@code AffinityDataSource::applyEvent}, {@code Cluster::applyEvent}. */
    @FunctionalInterface
    public interface EventSink {
        /**
         * @param line one FAN or RLB line
         * @return the number of node state changes
         * @throws Exception if the line is refused
         */
        int apply(String line) throws Exception;
    }

    private final EventSink sink;
    private final Cluster relay;
    private final Map<String, Map<String, String>> advice = new LinkedHashMap<>();
    private volatile FanSubscription subscription;

    /** @param dataSource the data source the events are applied to */
    public FanAdapter(AffinityDataSource dataSource) {
        this(Objects.requireNonNull(dataSource, "dataSource")::applyEvent);
    }

    /** @param sink where the translated lines go */
    public FanAdapter(EventSink sink) {
        this.sink = Objects.requireNonNull(sink, "sink");
        this.relay = null;
    }

    private FanAdapter(Cluster relay) {
        this.sink = relay::applyEvent;
        this.relay = relay;
    }

    /**
     * An adapter that relays each event into the cluster's topology feed
     * ({@link Cluster#publishEvent}), so every subscribed process of the fleet gets it.
     *
     * @param cluster a cluster with {@code topology.feed}
     * @return the adapter
     * @throws IllegalArgumentException if the cluster has no topology feed
     */
    public static FanAdapter relayToFeed(Cluster cluster) {
        Objects.requireNonNull(cluster, "cluster");
        if (cluster.feedStatus().isEmpty()) {
            throw new IllegalArgumentException("relayToFeed: cluster " + cluster.name()
                    + " has no topology.feed to relay FAN events into");
        }
        return new FanAdapter(cluster);
    }

    /** @return whether this adapter relays into the topology feed rather than applying locally */
    public boolean relaysToFeed() {
        return relay != null;
    }

    /**
     * Configures simplefan with the ONS configuration and subscribes a new adapter.
     *
     * @param dataSource the data source
     * @param onsConfig simplefan's {@code FanManager.configure} properties (e.g. {@code onsNodes},
     *     {@code onsWalletFile}); null or empty to keep its configuration
     * @param subscription {@code FanManager.subscribe} properties (e.g. {@code serviceName})
     * @return the subscribed adapter; close it to unsubscribe
     */
    public static FanAdapter subscribe(AffinityDataSource dataSource, Properties onsConfig, Properties subscription) {
        return subscribe(dataSource, onsConfig, subscription, false);
    }

    /**
     * As {@link #subscribe(AffinityDataSource, Properties, Properties)}, optionally as the
     * fleet's ONS relay.
     *
     * @param dataSource the data source
     * @param onsConfig simplefan's {@code FanManager.configure} properties; null or empty to keep
     *     its configuration
     * @param subscription {@code FanManager.subscribe} properties
     * @param relayToFeed publish each event into the data source's topology feed
     *     ({@link #relayToFeed(Cluster)}) instead of applying it here only
     * @return the subscribed adapter; close it to unsubscribe
     * @throws IllegalArgumentException if {@code relayToFeed} and the data source's config has no
     *     {@code topology.feed}
     * @throws IllegalStateException if {@code relayToFeed} and the data source cannot start
     */
    public static FanAdapter subscribe(AffinityDataSource dataSource, Properties onsConfig, Properties subscription,
            boolean relayToFeed) {
        FanAdapter adapter;
        if (relayToFeed) {
            try {
                adapter = relayToFeed(Objects.requireNonNull(dataSource, "dataSource").getCluster());
            } catch (SQLException e) {
                throw new IllegalStateException("relayToFeed: the data source cannot start: " + e.getMessage(), e);
            }
        } else {
            adapter = new FanAdapter(dataSource);
        }
        FanManager fan = FanManager.getInstance();
        if (onsConfig != null && !onsConfig.isEmpty()) {
            fan.configure(onsConfig);
        }
        FanSubscription sub = fan.subscribe(subscription);
        sub.addListener(adapter);
        adapter.subscription = sub;
        return adapter;
    }

    @Override
    public void close() {
        FanSubscription sub = subscription;
        subscription = null;
        if (sub != null) {
            sub.removeListener(this);
            sub.close();
        }
    }

    @Override
    public void handleEvent(ServiceDownEvent e) {
        ServiceDownEvent.ServiceMemberEvent m = e.getServiceMemberEvent();
        boolean member = m != null && e.getKind() != ServiceDownEvent.EventKind.COMPOSITE;
        StringBuilder line = serviceLine(member, e.getServiceName(), e.getDatabaseUniqueName(),
                member ? m.getInstanceName() : null, member ? m.getNodeName() : null, "down",
                e.getReason() == null ? null : e.getReason().name());
        if (e.getDrainTimeout() > 0) {
            pair(line, "drain_timeout", Integer.toString(e.getDrainTimeout()));
        }
        apply(line, e);
    }

    @Override
    public void handleEvent(ServiceUpEvent e) {
        ServiceUpEvent.ServiceMemberEvent m = e.getServiceMemberEvent();
        boolean member = m != null && e.getKind() != ServiceUpEvent.EventKind.COMPOSITE;
        StringBuilder line = serviceLine(member, e.getServiceName(), e.getDatabaseUniqueName(),
                member ? m.getInstanceName() : null, member ? m.getNodeName() : null, "up",
                e.getReason() == null ? null : e.getReason().name());
        if (e.getCardinality() > 0) {
            pair(line, "card", Integer.toString(e.getCardinality()));
        }
        apply(line, e);
    }

    /**
     * The head of a service event's line: one instance's ({@code SERVICEMEMBER}) or
     * the whole service's ({@code SERVICE}, a composite event), then status and reason.
     */
    private static StringBuilder serviceLine(boolean member, String service, String database, String instance,
            String host, String status, String reason) {
        StringBuilder line = new StringBuilder(member ? "SERVICEMEMBER VERSION=1.0" : "SERVICE VERSION=1.0");
        pair(line, "service", service);
        pair(line, "database", database);
        if (member) {
            pair(line, "instance", instance);
            pair(line, "host", host);
        }
        line.append(" status=").append(status);
        if (reason != null) {
            pair(line, "reason", reason);
        }
        return line;
    }

    @Override
    public void handleEvent(NodeDownEvent e) {
        apply(nodeLine(e.getNodeName(), e.getIncarnation(), "nodedown"), e);
    }

    @Override
    public void handleEvent(NodeUpEvent e) {
        apply(nodeLine(e.getNodeName(), e.getIncarnation(), "up"), e);
    }

    private static StringBuilder nodeLine(String host, int incarnation, String status) {
        StringBuilder line = new StringBuilder("NODE VERSION=1.0");
        pair(line, "host", host);
        pair(line, "incarnation", Integer.toString(incarnation));
        return line.append(" status=").append(status);
    }

    @Override
    public void handleEvent(LoadAdvisoryEvent e) {
        StringBuilder line = new StringBuilder("SERVICEMETRICS VERSION=1.0");
        pair(line, "database", e.getDatabaseUniqueName());
        pair(line, "service", e.getServiceName());
        line.append(" {");
        synchronized (advice) {
            Map<String, String> entries = advice.computeIfAbsent(
                    e.getDatabaseUniqueName() + "/" + e.getServiceName(), k -> new LinkedHashMap<>());
            entries.put(e.getInstanceName(), "{instance=" + word(e.getInstanceName()) + " percent="
                    + Math.max(0, Math.min(100, e.getPercent())) + " flag=" + flag(e.getLoadStatus()) + "}");
            for (String entry : entries.values()) {
                line.append(' ').append(entry);
            }
        }
        line.append(" }");
        apply(line, e);
    }

    private static String flag(LoadAdvisoryEvent.LoadStatus s) {
        return s == null ? "UNKNOWN" : s.name();
    }

    private void apply(StringBuilder line, FanEvent e) {
        if (e.getTimestamp() != null) {
            SimpleDateFormat f = new SimpleDateFormat("yyyy-MM-dd HH:mm:ss", Locale.ROOT);
            f.setTimeZone(TimeZone.getTimeZone("UTC"));
            line.append(" timestamp=").append(f.format(e.getTimestamp()));
        }
        String text = line.toString();
        if (relay != null) {
            relay(text);
            return;
        }
        try {
            int changed = sink.apply(text);
            LOG.log(Level.DEBUG, () -> "simplefan: " + text + " -> " + changed + " node state change(s)");
        } catch (Exception ex) {
            LOG.log(Level.WARNING, "simplefan: event not applied: " + text + ": " + ex.getMessage());
        }
    }

    private void relay(String text) {
        try {
            long revision = relay.publishEvent(text);
            LOG.log(Level.DEBUG, () -> "simplefan: " + text + " -> relayed at feed revision " + revision);
        } catch (FeedUnavailableException ex) {
            try {
                int changed = relay.applyEvent(text);
                // Says what the fleet misses: the point of relaying was that every process gets it.
                LOG.log(Level.WARNING, "simplefan: the topology feed did not take the event (" + ex.getMessage()
                        + "), so it was applied in this process only (" + changed
                        + " node state change(s) here); the fleet's other processes miss it until Oracle's"
                        + " next event for the same resource: " + text);
            } catch (RuntimeException local) {
                LOG.log(Level.WARNING, "simplefan: the topology feed did not take the event (" + ex.getMessage()
                        + ") and this process refused it too (" + local.getMessage() + "); event dropped: " + text);
            }
        } catch (RuntimeException ex) {
            // Refused before anything was written (a foreign database or service, a malformed line).
            LOG.log(Level.WARNING, "simplefan: event refused, neither written to the topology feed nor applied ("
                    + ex.getMessage() + "); event dropped: " + text);
        }
    }

    private static void pair(StringBuilder line, String key, String value) {
        if (value != null && !value.isEmpty()) {
            line.append(' ').append(key).append('=').append(word(value));
        }
    }

    /** Values are single words in the line format: a space or brace would split or nest them. */
    private static String word(String v) {
        return v == null ? "" : v.replaceAll("[\\s{}=]", "_");
    }
}
