package io.racaffinity.jmx;

import io.racaffinity.AffinityException;
import io.racaffinity.Cluster;
import io.racaffinity.ClusterClosedException;
import io.racaffinity.FeedStatus;
import io.racaffinity.FeedUnavailableException;
import io.racaffinity.NodeMetrics;
import io.racaffinity.NodeState;
import io.racaffinity.ReplayCounts;
import io.racaffinity.Scope;
import java.lang.management.ManagementFactory;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Function;
import java.util.function.Supplier;
import javax.management.InstanceAlreadyExistsException;
import javax.management.InstanceNotFoundException;
import javax.management.JMException;
import javax.management.MBeanRegistration;
import javax.management.MBeanServer;
import javax.management.MalformedObjectNameException;
import javax.management.ObjectName;

/**
 * The {@link ClusterMXBean} of a {@link Cluster}. Operations that fail throw a JDK exception
 * with the core's message, so a remote JMX client needs no racaffinity classes:
 * {@link IllegalStateException} when the topology feed did not take an operator's change
 * (the call may succeed later; nothing changed), {@link IllegalArgumentException} for the
 * rest (an unknown node, a malformed event). Once the cluster is closed (while its MXBean is
 * still registered: a cluster given to a data source and closed first), every attribute and
 * operation that asks the cluster throws {@link IllegalStateException}.
 */
public final class ClusterMonitor implements ClusterMXBean, MBeanRegistration {
    /** The JMX domain. */
    public static final String DOMAIN = "io.racaffinity";

    /**
     * The clusters whose MXBean is registered, by name: kept by the MBean server's own callbacks, so that an MXBean
     * registered or unregistered through the server (not {@link #register}, {@link #unregister}) is followed too.
     */
    private static final Map<ObjectName, Cluster> REGISTERED = new HashMap<>();

    private final Cluster cluster;
    /** The name this MXBean is being or was registered under in the platform MBean server, or null. */
    private volatile ObjectName registeredAs;

    /**
     * Creates the MXBean of a cluster (not registered).
     *
     * @param cluster the cluster
     */
    public ClusterMonitor(Cluster cluster) {
        this.cluster = cluster;
    }

    /**
     * The ObjectName of a cluster's MBean: {@code io.racaffinity:type=Cluster,name=<name>},
     * the name quoted when it has characters ObjectName reserves.
     *
     * @param clusterName the config's {@code name}
     * @return the ObjectName
     */
    public static ObjectName objectName(String clusterName) {
        String value = clusterName.matches("[A-Za-z0-9_.\\-$#@/]+") ? clusterName : ObjectName.quote(clusterName);
        try {
            return new ObjectName(DOMAIN + ":type=Cluster,name=" + value);
        } catch (MalformedObjectNameException e) {
            throw new IllegalArgumentException("cluster name " + clusterName + " makes no ObjectName", e);
        }
    }

    /**
     * Registers the cluster's MXBean with the platform MBean server.
     *
     * @param cluster the cluster
     * @return its ObjectName
     * @throws InstanceAlreadyExistsException if a cluster of that name is registered
     * @throws IllegalStateException if the cluster is closed (every attribute of its MXBean would throw)
     */
    public static ObjectName register(Cluster cluster) throws InstanceAlreadyExistsException {
        ObjectName name = objectName(cluster.name());
        open(cluster::nodeNames);
        // No lock held over the server's call: its callbacks take REGISTERED, and an unregistration of this name
        // on another thread holds the name in the server while its callback waits for that lock.
        try {
            ManagementFactory.getPlatformMBeanServer().registerMBean(new ClusterMonitor(cluster), name);
        } catch (InstanceAlreadyExistsException e) {
            throw e;
        } catch (JMException e) {
            throw new IllegalStateException("cannot register " + name + ": " + e, e);
        }
        return name;
    }

    /**
     * Whether the platform MBean server's MXBean under this cluster's name is this very cluster's, whoever
     * registered it ({@link #register}, or the application a {@code ClusterMonitor} of its own) and however an
     * earlier one under the name was unregistered (through {@link #unregister} or the server): where
     * {@code register} finds its name taken, whether by this cluster (the application registered it) or by
     * another of the same name (a clash).
     *
     * @param cluster the cluster
     * @return whether its MXBean is the one under its name
     */
    public static boolean isRegistered(Cluster cluster) {
        ObjectName name = objectName(cluster.name());
        Cluster holder;
        synchronized (REGISTERED) {
            holder = REGISTERED.get(name);
        }
        return holder == cluster && ManagementFactory.getPlatformMBeanServer().isRegistered(name);
    }

    /**
     * Unregisters an MBean registered by {@link #register}; no-op if it is gone.
     *
     * @param name its ObjectName
     */
    public static void unregister(ObjectName name) {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        try {
            server.unregisterMBean(name);
        } catch (InstanceNotFoundException e) {
            // already gone
        } catch (JMException e) {
            throw new IllegalStateException("cannot unregister " + name + ": " + e, e);
        }
    }

    /**
     * Not for the application: the MBean server calls it.
     *
     * @param server the server
     * @param name the name asked for
     * @return that name
     */
    @Override
    public ObjectName preRegister(MBeanServer server, ObjectName name) {
        // An MBean server of the application's own holds it under a name the platform's may give another cluster.
        registeredAs = server == ManagementFactory.getPlatformMBeanServer() ? name : null;
        return name;
    }

    /**
     * Not for the application: the MBean server calls it.
     *
     * @param done whether the registration was done
     */
    @Override
    public void postRegister(Boolean done) {
        ObjectName name = registeredAs;
        if (Boolean.TRUE.equals(done) && name != null) {
            synchronized (REGISTERED) {
                REGISTERED.put(name, cluster);
            }
        }
    }

    /** Not for the application: the MBean server calls it. */
    @Override
    public void preDeregister() {}

    /** Not for the application: the MBean server calls it. */
    @Override
    public void postDeregister() {
        ObjectName name = registeredAs;
        if (name != null) {
            synchronized (REGISTERED) {
                REGISTERED.remove(name, cluster);
            }
        }
    }

    /** Asks the cluster: a closed one is an {@link IllegalStateException}, a JDK class, not the core's. */
    private static <T> T open(Supplier<T> call) {
        try {
            return call.get();
        } catch (ClusterClosedException e) {
            throw new IllegalStateException(e.getMessage());
        }
    }

    private static void open(Runnable call) {
        open(() -> {
            call.run();
            return null;
        });
    }

    private <T> Map<String, T> perNode(Function<NodeMetrics, T> f) {
        List<NodeMetrics> nodes = open(cluster::nodeMetrics);
        Map<String, T> m = new LinkedHashMap<>();
        for (NodeMetrics n : nodes) {
            m.put(n.name(), f.apply(n));
        }
        return m;
    }

    @Override
    public String getName() {
        return cluster.name();
    }

    @Override
    public String[] getNodeNames() {
        return open(cluster::nodeNames).toArray(new String[0]);
    }

    @Override
    public Map<String, String> getNodeStates() {
        return perNode(n -> n.state().name());
    }

    @Override
    public Map<String, String> getNodeDownCauses() {
        return perNode(NodeMetrics::downCause);
    }

    @Override
    public Map<String, Long> getNodePicks() {
        return perNode(NodeMetrics::picks);
    }

    @Override
    public Map<String, Long> getNodeInFlight() {
        return perNode(NodeMetrics::inFlight);
    }

    @Override
    public Map<String, Long> getNodeFailures() {
        return perNode(NodeMetrics::failures);
    }

    @Override
    public Map<String, Long> getNodeTxSpans() {
        return perNode(NodeMetrics::txSpans);
    }

    @Override
    public Map<String, Long> getNodeProbeMisses() {
        return perNode(NodeMetrics::probeMisses);
    }

    @Override
    public long getTotalPicks() {
        // Each node's picks already saturate at Long.MAX_VALUE (u64 in the core): a plain sum of
        // two such nodes wraps negative, so the total saturates too.
        long total = 0;
        for (NodeMetrics n : open(cluster::nodeMetrics)) {
            total = n.picks() > Long.MAX_VALUE - total ? Long.MAX_VALUE : total + n.picks();
        }
        return total;
    }

    @Override
    public String getMetricsJson() {
        return open(cluster::metricsJson);
    }

    @Override
    public String getMetricsPrometheus() {
        return open(cluster::metricsPrometheus);
    }

    private Optional<FeedStatus> feed() {
        return open(cluster::feedStatus);
    }

    @Override
    public String getFeedUrl() {
        return feed().map(FeedStatus::url).orElse(null);
    }

    @Override
    public boolean isFeedConnected() {
        return feed().map(FeedStatus::connected).orElse(false);
    }

    @Override
    public long getFeedRevision() {
        return feed().map(FeedStatus::revision).orElse(0L);
    }

    @Override
    public long getFeedLag() {
        return feed().map(FeedStatus::lag).orElse(0L);
    }

    @Override
    public long getFeedRecordsApplied() {
        return feed().map(FeedStatus::applied).orElse(0L);
    }

    @Override
    public long getFeedRecordsRefused() {
        return feed().map(FeedStatus::refused).orElse(0L);
    }

    @Override
    public long getFeedReconnects() {
        return feed().map(FeedStatus::reconnects).orElse(0L);
    }

    @Override
    public String getFeedLastError() {
        return feed().flatMap(FeedStatus::lastError).orElse(null);
    }

    @Override
    public String getFeedLastRefused() {
        return feed().flatMap(FeedStatus::lastRefused).orElse(null);
    }

    private ReplayCounts replay() {
        return ReplayCounts.of(cluster);
    }

    @Override
    public long getReplays() {
        return replay().replayed();
    }

    @Override
    public long getReplayCommittedAlready() {
        return replay().committedAlready();
    }

    @Override
    public Map<String, Long> getReplayRefusals() {
        return replay().refusals();
    }

    @Override
    public long getReplayOutcomeChecks() {
        return replay().outcomeChecks();
    }

    @Override
    public long getReplayOutcomesForced() {
        return replay().outcomesForced();
    }

    @Override
    public boolean isUseStrictXAAffinity() {
        return open(() -> cluster.isStrict(Scope.TRANSACTION));
    }

    @Override
    public void setUseStrictXAAffinity(boolean strict) {
        open(() -> cluster.setStrict(Scope.TRANSACTION, strict));
    }

    @Override
    public boolean isUseStrictWebSessionAffinity() {
        return open(() -> cluster.isStrict(Scope.SESSION));
    }

    @Override
    public void setUseStrictWebSessionAffinity(boolean strict) {
        open(() -> cluster.setStrict(Scope.SESSION, strict));
    }

    @Override
    public boolean isUseStrictThreadAffinity() {
        return open(() -> cluster.isStrict(Scope.THREAD));
    }

    @Override
    public void setUseStrictThreadAffinity(boolean strict) {
        open(() -> cluster.setStrict(Scope.THREAD, strict));
    }

    @Override
    public boolean isUseStrictDataAffinity() {
        return open(() -> cluster.isStrict(Scope.DATA));
    }

    @Override
    public void setUseStrictDataAffinity(boolean strict) {
        open(() -> cluster.setStrict(Scope.DATA, strict));
    }

    private void setState(String node, NodeState state) {
        try {
            cluster.setNodeState(node, state);
        } catch (ClusterClosedException e) {
            throw new IllegalStateException(e.getMessage());
        } catch (FeedUnavailableException e) {
            // Not the caller's argument: the same call succeeds once etcd takes writes.
            throw new IllegalStateException(e.getMessage());
        } catch (AffinityException e) {
            throw new IllegalArgumentException(e.getMessage());
        }
    }

    @Override
    public void markDown(String node) {
        setState(node, NodeState.DOWN);
    }

    @Override
    public void markUp(String node) {
        setState(node, NodeState.UP);
    }

    @Override
    public void drain(String node) {
        setState(node, NodeState.DRAINING);
    }

    @Override
    public int applyEvent(String line) {
        try {
            return cluster.applyEvent(line);
        } catch (ClusterClosedException e) {
            throw new IllegalStateException(e.getMessage());
        } catch (AffinityException e) {
            throw new IllegalArgumentException(e.getMessage());
        }
    }
}
